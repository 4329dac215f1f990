// Package leader elects one leader among several instances through a lease row
// in the store. The lease has a term that grows every time the holder changes;
// the leader passes its term to every action it fences (see flow.Leader),
// so a deposed leader cannot act once another has taken the lease.
//
// The maintenance runners (and with them the supervisor) and the client's
// instance lease take their leases through it.
package leader
