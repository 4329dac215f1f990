// Package fault is drover's named fault-injection point for batched writes:
// a test arms it with a marker, and every write of many items at once that
// checks it (the scheduler's tick, the agent runtime's reply queue, the
// webhook dispatcher's results, the convoy processor's settles) fails, as
// the database fails on a value it refuses, when a text of one of its items
// contains the marker. The test then sees whether the other items still
// commit and the one at fault is recorded as failed. Unarmed, a check costs
// one atomic load.
package fault
