package convoy

import (
	"context"
	"time"

	"github.com/drover-run/drover/internal/maintenance"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/startstop"
)

// maintenanceInterval is how often a client's dedupe expiry runs while it
// leads its lease (maintenance.DedupeLease).
const maintenanceInterval = time.Second

// maintain runs the expiry of dedupe entries (maintenance.DedupeExpiry)
// while any of the client's processors runs, so that an application
// using only session queues, with no drover.Client supervisor, still
// expires them. Of all processes running it, only the lease's holder
// deletes. Call the returned function when the processor stops; the last
// one stops the service.
func (c *Client) maintain(ctx context.Context) (release func()) {
	c.mntMu.Lock()
	defer c.mntMu.Unlock()
	c.mntUsers++
	if c.mntUsers == 1 {
		// While notifications arrive (they keep the processors awake), an
		// expiry that found nothing runs again only after the runner's
		// IdleInterval: an expired entry left a while longer costs only its
		// row, since publishes ignore it.
		r := &maintenance.Runner{Driver: c.store, Clock: c.clock, Log: c.log, Lease: maintenance.DedupeLease,
			Instance: c.cfg.InstanceID + "/maintenance", Interval: maintenanceInterval, Live: notifier.For(c.store).Live,
			Services: []maintenance.Service{maintenance.DedupeExpiry()}}
		c.mnt = &startstop.Func{Name: "convoy maintenance", Run: r.Run, Log: c.log}
		_ = c.mnt.Start(context.WithoutCancel(ctx)) // a new Func always starts
	}
	return func() {
		c.mntMu.Lock()
		defer c.mntMu.Unlock()
		c.mntUsers--
		if c.mntUsers == 0 {
			c.mnt.Stop()
			c.mnt = nil
		}
	}
}
