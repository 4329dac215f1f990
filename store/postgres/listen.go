package postgres

import (
	"context"
	"fmt"
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
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("postgres: listen: %w", err)
		}
		if n.Channel != d.channel {
			continue // queued on the connection before it was ours (a pooler's server connection)
		}
		wake(n.Payload)
	}
}
