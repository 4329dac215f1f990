// Package recent counts calls and failures over the last few minutes, for
// the console's "recent error rate" of an agent or a remote host: a fixed
// ring of one-minute buckets, so memory stays constant however many calls
// are made.
package recent
