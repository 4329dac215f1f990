package drover

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/drover-run/drover/internal/leader"
	"github.com/drover-run/drover/store"
)

// ErrInstanceInUse is returned by Start when another live process runs with
// the same InstanceID. After a crash, the ID frees up once its lease expires
// (Config.LeaseTTL).
var ErrInstanceInUse = errors.New("instance ID in use by another live process")

// errInstanceLost aborts a scheduler transaction once the lease is gone.
var errInstanceLost = errors.New("instance lease lost")

// instancePrefix begins the name of every instance lease.
const instancePrefix = "instance:"

// rolesMark separates an instance lease holder's token from the roles
// it runs, which the holder carries so that any process can list the
// live instances and their roles from the leases alone.
const rolesMark = " roles="

// rolesText writes the roles the client runs: "scheduler:N" (N
// schedulers), "agent", "supervisor", comma-separated.
func (c *Client) rolesText() string {
	var roles []string
	if c.cfg.Roles.Scheduler && c.cfg.Schedulers > 0 {
		roles = append(roles, fmt.Sprintf("scheduler:%d", c.cfg.Schedulers))
	}
	if c.cfg.Roles.Agent {
		roles = append(roles, "agent")
	}
	if c.cfg.Roles.Supervisor {
		roles = append(roles, "supervisor")
	}
	return strings.Join(roles, ",")
}

// instanceLease makes an InstanceID exclusive to one running Client: two
// processes acting as the same scheduler would both treat its tasks as
// their own. Each Start takes the lease "instance:<ID>" with a fresh token.
type instanceLease struct {
	el *leader.Elector
}

func (c *Client) acquireInstance(ctx context.Context) (*instanceLease, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	el := &leader.Elector{Driver: c.store, Clock: c.clock, Name: instancePrefix + c.cfg.InstanceID,
		Instance: hex.EncodeToString(b[:]) + rolesMark + c.rolesText(), TTL: c.cfg.LeaseTTL, Recorder: c.counters.Recorder}
	term, err := el.TryAcquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("instance lease: %w", err)
	}
	if term == 0 {
		l, _ := c.store.Reader().LeaseGet(ctx, &store.LeaseGetParams{Name: el.Name})
		until := ""
		if l != nil {
			until = fmt.Sprintf(" (its lease runs until %s unless renewed)", l.ExpiresAt.Format(time.RFC3339))
		}
		return nil, fmt.Errorf("%w: %q%s", ErrInstanceInUse, c.cfg.InstanceID, until)
	}
	return &instanceLease{el: el}, nil
}

// keep renews the lease every interval until ctx ends; it returns an error
// when the lease is lost (another process took the ID after it expired).
func (l *instanceLease) keep(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		term, err := l.el.TryAcquire(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && term == 0 {
			return errInstanceLost
		}
		// A store error is retried at the next tick; check() stops the
		// schedulers meanwhile if the lease runs out.
	}
}

// check fails unless this process still holds the lease at now; it runs
// inside each scheduler transaction.
func (l *instanceLease) check(ctx context.Context, x store.Executor, now time.Time) error {
	// LeaseCheck, not LeaseGet: a driver can send the check with the
	// transaction's first real statement instead of a round trip of its own.
	err := x.LeaseCheck(ctx, &store.LeaseCheckParams{Name: l.el.Name, Holder: l.el.Instance, Now: now})
	if errors.Is(err, store.ErrLeaseNotHeld) {
		return fmt.Errorf("%w: %w", errInstanceLost, err)
	}
	return err
}

func (l *instanceLease) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = l.el.Resign(ctx)
}
