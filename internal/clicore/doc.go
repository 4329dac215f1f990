// Package clicore is what every drover command works with: the
// invocation's Env (standard streams, global flags, the logger), the store
// named by --db and --schema (Target, OpenStore, Database with its
// explanations of store errors), usage errors and JSON output. Package
// cli assembles the commands; the demo and bench commands
// (internal/democmd, internal/benchcmd) use it too, so they live outside
// the command line's core.
package clicore
