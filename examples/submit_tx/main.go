// Command submit_tx shows SubmitTx: the application's own business row and
// the drover task are written in one transaction, so both exist or neither
// does.
//
//	go run ./examples/submit_tx
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store/sqlite"
)

// orders is the workflow of the orders placed here, as drover server --demo
// runs it: reserve stock, charge the card, ship the parcel. This process
// only submits: the agents the steps name run in another process (a
// drover server with --demo), so they are declared external and the
// client is never started.
var orders = drover.Workflow{
	Name: "orders",
	Steps: []drover.Step{
		{Name: "reserve", Agent: "inventory", Compensation: "inventory-release"},
		{Name: "charge", Agent: "payments", Compensation: "payments-refund"},
		{Name: "ship", Agent: "shipping"},
	},
	OnFailure: drover.PolicyCompensate,
}

var externalAgents = []string{"inventory", "inventory-release", "payments", "payments-refund", "shipping"}

// orderInput is the orders workflow's task input.
func orderInput(orderID string, amount int64) []byte {
	b, _ := json.Marshal(struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount"`
	}{orderID, amount}) // cannot fail
	return b
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "drover-submit-tx-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The application and drover share one SQLite file.
	drv, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Options{Create: true})
	if err != nil {
		return err
	}
	defer drv.Close()

	client, err := drover.New(drover.Config{
		Store:          drv,
		Workflows:      []drover.Workflow{orders},
		ExternalAgents: externalAgents,
	})
	if err != nil {
		return err
	}
	if err := client.Migrate(ctx); err != nil {
		return err
	}

	// DB is the driver's write handle. It has a single connection: while a
	// transaction is open, do not call Client methods that write outside it.
	db := drv.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id     TEXT    NOT NULL PRIMARY KEY,
		amount INTEGER NOT NULL
	)`); err != nil {
		return err
	}

	// placeOrder inserts the business row and submits its task together.
	placeOrder := func(orderID string, amount int64, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // no-op after Commit
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES (?, ?)`, orderID, amount); err != nil {
			return err
		}
		if _, err := client.SubmitTx(ctx, tx, orders.Name, orderInput(orderID, amount), &drover.SubmitOptions{ID: "order-" + orderID}); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback()
		}
		return tx.Commit()
	}

	if err := placeOrder("o-1", 1234, true); err != nil {
		return err
	}
	if err := placeOrder("o-2", 99, false); err != nil {
		return err
	}

	for _, id := range []string{"o-1", "o-2"} {
		var amount int64
		err := db.QueryRowContext(ctx, `SELECT amount FROM orders WHERE id = ?`, id).Scan(&amount)
		row := "present"
		if errors.Is(err, sql.ErrNoRows) {
			row = "absent"
		} else if err != nil {
			return err
		}
		task := "absent"
		if t, err := client.Task(ctx, "order-"+id); err == nil {
			task = fmt.Sprintf("present (%s, %d steps)", t.ProcessState, len(t.Steps))
		} else if !errors.Is(err, drover.ErrTaskNotFound) {
			return err
		}
		fmt.Printf("%s: business row %s, task %s\n", id, row, task)
	}
	fmt.Println("o-1 was committed: both exist. o-2 was rolled back: neither exists.")
	return nil
}
