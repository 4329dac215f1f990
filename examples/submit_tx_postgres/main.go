// Command submit_tx_postgres shows SubmitTx on PostgreSQL: the application's
// own business row and the drover task are written in one transaction of the
// application's own pgx pool, so both exist or neither does.
//
// The application keeps its table (orders) in the public schema; drover
// keeps its tables in the schema drover_example of the same database. It
// needs a PostgreSQL server and the CREATE privilege on the database:
//
//	go run ./examples/submit_tx_postgres --db 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
//
// Afterwards, inspect the tasks with
//
//	go run ./cmd/drover list --db 'postgres://…' --schema drover_example
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store/postgres"
)

// orders is the workflow of the orders placed here, as drover server --demo
// runs it: reserve stock, charge the card, ship the parcel. This process
// only submits: the agents the steps name run in a drover server (drover
// server --demo --db … --schema drover_example), so they are declared
// external and the client is never started.
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
	dbURL := flag.String("db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL connection URL")
	flag.Parse()
	if err := run(context.Background(), *dbURL); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dbURL string) error {
	// The application's own pool. drover uses it too: postgres.New leaves
	// it open on Close, and qualifies every name with its schema, so the
	// pool's search_path does not matter.
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	drv, err := postgres.New(pool, postgres.Options{Schema: "drover_example"})
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
	if err := client.Migrate(ctx); err != nil { // creates the schema drover_example
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS public.orders (
		id     text   NOT NULL PRIMARY KEY,
		amount bigint NOT NULL
	)`); err != nil {
		return err
	}

	// IDs unique to this run, so the example can run again.
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	o1, o2, o3, o4 := "o-"+run+"-1", "o-"+run+"-2", "o-"+run+"-3", "o-"+run+"-4"

	// placeOrder inserts the business row and submits its task in one pgx
	// transaction. While it is open after SubmitTx, subscribers of drover's
	// history see no later event: commit (or roll back) promptly.
	placeOrder := func(orderID string, amount int64, commit bool) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) // no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO public.orders (id, amount) VALUES ($1, $2)`, orderID, amount); err != nil {
			return err
		}
		if _, err := client.SubmitTx(ctx, tx, orders.Name, orderInput(orderID, amount), &drover.SubmitOptions{ID: "order-" + orderID}); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}

	// The same with database/sql: a *sql.Tx of the pgx stdlib driver, here
	// on the same pool.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close() // leaves the pool open
	placeOrderSQL := func(orderID string, amount int64, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // no-op after Commit
		if _, err := tx.ExecContext(ctx, `INSERT INTO public.orders (id, amount) VALUES ($1, $2)`, orderID, amount); err != nil {
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

	for _, p := range []struct {
		place  func(string, int64, bool) error
		id     string
		amount int64
		commit bool
	}{
		{placeOrder, o1, 1234, true},
		{placeOrder, o2, 99, false},
		{placeOrderSQL, o3, 500, true},
		{placeOrderSQL, o4, 7, false},
	} {
		if err := p.place(p.id, p.amount, p.commit); err != nil {
			return fmt.Errorf("order %s: %w", p.id, err)
		}
	}

	for _, id := range []string{o1, o2, o3, o4} {
		var amount int64
		err := pool.QueryRow(ctx, `SELECT amount FROM public.orders WHERE id = $1`, id).Scan(&amount)
		row := "present"
		if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
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
	fmt.Printf("%s (pgx.Tx) and %s (*sql.Tx) were committed: both exist. %s and %s were rolled back: neither exists.\n", o1, o3, o2, o4)
	fmt.Println("The tasks wait in schema drover_example for a server: drover server --demo --db <url> --schema drover_example")
	return nil
}
