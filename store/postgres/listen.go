package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/store"
)

var _ store.Listener = (*Driver)(nil)

// Listen implements store.Listener: one pooled connection LISTENs on the
// schema's channel and hands every payload to wake, after
// wake(store.TopicListening). When the connection breaks (or the database
// restarts) it calls wake(store.TopicNotListening), since notifications
// sent meanwhile are lost, and reconnects with back-off.
func (d *Driver) Listen(ctx context.Context, wake func(topic string)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		listening := false
		err := d.listenOnce(ctx, wake, func() {
			backoff = 100 * time.Millisecond
			listening = true
			wake(store.TopicListening)
		})
		if listening {
			wake(store.TopicNotListening)
		}
		if ctx.Err() != nil {
			return nil
		}
		_ = err // the roles poll meanwhile; a listener has no caller to tell
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

func (d *Driver) listenOnce(ctx context.Context, wake func(string), listening func()) error {
	pooled, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: listen: %w", err)
	}
	// A LISTENing connection must not go back to the pool: take it out.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{d.channel}.Sanitize()); err != nil {
		return fmt.Errorf("postgres: listen: %w", err)
	}
	// LISTEN returning does not prove that notifications arrive (behind a
	// transaction pooler they never do; a half-open connection blocks
	// without an error): the roles rely on them only once a probe sent on
	// another connection came back, and again after every quiet spell.
	probe := probePrefix + strconv.FormatUint(rand.Uint64(), 36)
	if err := d.probe(ctx, conn, probe, wake); err != nil {
		return err
	}
	listening()
	for {
		wctx, cancel := context.WithTimeout(ctx, probeEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil {
			if err := d.probe(ctx, conn, probe, wake); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("postgres: listen: %w", err)
		}
		if n.Channel != d.channel || strings.HasPrefix(n.Payload, probePrefix) {
			continue // queued on the connection before it was ours (a pooler's server connection), or a probe
		}
		wake(n.Payload)
	}
}

// Probes of the listening connection: their payloads start with
// probePrefix (every listener skips them), a probe must come back within
// probeTimeout, and a connection quiet for probeEvery is probed again.
const (
	probePrefix  = "drover:probe:"
	probeTimeout = 5 * time.Second
	probeEvery   = 30 * time.Second
)

// probe notifies payload on another connection and waits for it on conn,
// handing on the notifications that arrive meanwhile.
func (d *Driver) probe(ctx context.Context, conn *pgx.Conn, payload string, wake func(string)) error {
	if _, err := d.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, d.channel, payload); err != nil {
		return fmt.Errorf("postgres: listen: send a probe: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			return fmt.Errorf("postgres: listen: the probe did not come back within %s (a transaction pooler between drover and PostgreSQL delivers no notifications): %w", probeTimeout, err)
		}
		switch {
		case n.Channel != d.channel || strings.HasPrefix(n.Payload, probePrefix) && n.Payload != payload:
		case n.Payload == payload:
			return nil
		default:
			wake(n.Payload)
		}
	}
}
