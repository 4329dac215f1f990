package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drover-run/drover/store"
)

var _ store.Listener = (*Driver)(nil)

// Listen implements store.Listener: one pooled connection LISTENs on the
// schema's channel and hands every payload to wake. When the connection
// breaks (or the database restarts) it reconnects with back-off and calls
// wake(store.TopicAll), because notifications sent meanwhile are lost.
func (d *Driver) Listen(ctx context.Context, wake func(topic string)) error {
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := d.listenOnce(ctx, wake, func() {
			backoff = 100 * time.Millisecond
			if !first {
				wake(store.TopicAll)
			}
			first = false
		})
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, store.ErrNotificationsLost) {
			return err
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
	listening()
	if err := d.probeListen(ctx, conn, wake); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("postgres: listen: %w", err)
		}
		if !strings.HasPrefix(n.Payload, probePrefix) {
			wake(n.Payload)
		}
	}
}

// probePrefix starts the payload of a listener's probe (probeListen),
// which is no topic: listeners do not pass it on.
const probePrefix = "probe:"

// probeListen proves that notifications reach conn, which has just run
// LISTEN: it notifies the channel through the pool, as Notify does, and
// waits up to d.listenProbeWait for any notification (real ones are
// passed to wake). A transaction-mode pooler (PgBouncer) runs the LISTEN on
// a server connection it then lends to other clients, so nothing arrives:
// then it returns store.ErrNotificationsLost, and the roles poll.
func (d *Driver) probeListen(ctx context.Context, conn *pgx.Conn, wake func(string)) error {
	channel := d.channel
	if d.listenProbeLost { // tests: a probe that never arrives
		channel += "_elsewhere"
	}
	if _, err := d.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, probePrefix+strconv.FormatInt(time.Now().UnixNano(), 36)); err != nil {
		return fmt.Errorf("postgres: listen: probe: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, d.listenProbeWait)
	defer cancel()
	n, err := conn.WaitForNotification(wctx)
	switch {
	case err == nil:
		if !strings.HasPrefix(n.Payload, probePrefix) {
			wake(n.Payload)
		}
		return nil
	case ctx.Err() == nil && wctx.Err() != nil:
		return fmt.Errorf("postgres: listen: no notification within %s of the probe: %w", d.listenProbeWait, store.ErrNotificationsLost)
	default:
		return fmt.Errorf("postgres: listen: %w", err)
	}
}
