package convoy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/store/sqlite"
)

// A session receiver hands out a session's messages one at a time, in order.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "convoy-example")
	defer os.RemoveAll(dir)
	drv, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		panic(err)
	}
	defer drv.Close()
	if err := drv.Migrate(ctx); err != nil {
		panic(err)
	}
	c, _ := convoy.New(convoy.Config{Store: drv})
	if _, err := c.Publish(ctx, "orders",
		convoy.Message{SessionID: "o-17", Body: []byte("create")},
		convoy.Message{SessionID: "o-18", Body: []byte("create")},
		convoy.Message{SessionID: "o-17", Body: []byte("pay")},
		convoy.Message{SessionID: "o-17", Body: []byte("ship"), EndOfSequence: true},
	); err != nil {
		panic(err)
	}

	r, _ := c.AcceptSession(ctx, "orders", "o-17")
	defer r.Close(ctx)
	for {
		m, err := r.Receive(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(m.SessionID, m.Seq, string(m.Body))
		if err := r.Complete(ctx, m, nil); err != nil {
			panic(err)
		}
	}
	// Output:
	// o-17 1 create
	// o-17 2 pay
	// o-17 3 ship
	// session "o-17" of queue "orders": session ended: its end-of-sequence message was settled
}
