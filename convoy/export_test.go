package convoy

// SetRoundHook makes every round of p first call f; an error fails the
// round as a store error would (a simulated store outage). Set it before
// Start.
func SetRoundHook(p *Processor, f func() error) { p.hookRound = f }
