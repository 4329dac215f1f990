// Command drover is the drover command line: run the Scheduler, Agent and
// Supervisor roles, submit and inspect tasks, and run the demo and benchmark.
// Run "drover --help" for the commands.
package main
