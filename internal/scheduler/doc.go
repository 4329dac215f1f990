// Package scheduler is the Scheduler role: it claims Pending tasks from the
// state store (setting LockedBy), dispatches each task's steps in order as
// request messages to agents, and applies the agents' replies, fenced by
// attempt and CompleteBy.
//
// One Scheduler is one instance (one LockedBy value). It works in batches:
// each loop applies every reply that has arrived and claims new tasks up to
// its in-flight limit, all in one transaction.
//
// Package engine runs a process's schedulers; the transitions they apply
// are package flow's, and the replies of local agents arrive in memory from
// package agentrt.
package scheduler
