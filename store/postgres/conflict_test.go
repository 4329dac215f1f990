package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/postgres"
)

// Two transactions that lock two sessions in opposite orders deadlock; the
// server aborts one of them, and its error is store.ErrConflict with the
// server's error (SQLSTATE 40P01) kept in the chain. Both through a driver
// primitive (SessionGet locks the session's row in a transaction) and
// through an application statement on TxOf.
func TestDeadlockIsErrConflict(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"primitive", "TxOf"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			ctx := context.Background()
			now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
			err := d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
				_, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Now: now, Messages: []store.PublishMessage{
					{Queue: "q", SessionID: "a", Body: []byte("1")}, {Queue: "q", SessionID: "b", Body: []byte("1")}}})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			lock := func(ctx context.Context, x store.Executor, session string) error {
				if via == "primitive" {
					_, err := x.SessionGet(ctx, &store.SessionGetParams{Queue: "q", SessionID: session})
					return err
				}
				tx, err := postgres.TxOf(x)
				if err != nil {
					return err
				}
				_, err = tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM %s.queue_sessions WHERE queue = 'q' AND session_id = $1 FOR UPDATE`,
					pgx.Identifier{d.Schema()}.Sanitize()), session)
				return err
			}
			// Each transaction locks its first session, waits until the
			// other has locked its own, then asks for the other's.
			var (
				locked = [2]chan struct{}{make(chan struct{}), make(chan struct{})}
				errs   = make(chan error, 2)
			)
			for i, order := range [2][2]string{{"a", "b"}, {"b", "a"}} {
				go func() {
					errs <- d.InTx(ctx, func(ctx context.Context, x store.Executor) error {
						if err := lock(ctx, x, order[0]); err != nil {
							return err
						}
						close(locked[i])
						<-locked[1-i]
						return lock(ctx, x, order[1])
					})
				}()
			}
			var got []error
			for range 2 {
				select {
				case err := <-errs:
					got = append(got, err)
				case <-time.After(30 * time.Second):
					t.Fatal("the two transactions did not end: no deadlock detected")
				}
			}
			var conflicts int
			for _, err := range got {
				if err == nil {
					continue
				}
				if !errors.Is(err, store.ErrConflict) {
					t.Errorf("error %v: want errors.Is(err, store.ErrConflict)", err)
					continue
				}
				conflicts++
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "40P01" {
					t.Errorf("error %v: want the server's deadlock_detected (40P01) in the chain", err)
				}
			}
			if conflicts != 1 || (got[0] == nil) == (got[1] == nil) {
				t.Errorf("results %v: want one transaction aborted with ErrConflict and the other committed", got)
			}
		})
	}
}
