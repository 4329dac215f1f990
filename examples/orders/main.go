// Command orders shows drover used as a library: an order workflow (reserve
// stock, charge the card, ship the parcel) whose agents call a remote shop
// service that fails now and then. An agent retries a failed call with the
// step's idempotency key, so a call whose answer was lost is not applied
// twice; a card the shop declines fails the charge for good, and the
// workflow is compensated (the stock reserved for it is released).
//
// The shop is a small HTTP server in this program (see shop below); in a
// real application the agents call the services the steps stand for.
//
//	go run ./examples/orders
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/store/sqlite"
)

// order is the task input: {"order_id":"o-1","amount":1000}.
type order struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	// The remote service the agents call.
	s := newShop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s}
	go func() { _ = srv.Serve(ln) }() // ends with ErrServerClosed at srv.Close
	defer srv.Close()
	shopURL := "http://" + ln.Addr().String()

	// The state store: one SQLite file.
	dir, err := os.MkdirTemp("", "drover-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	drv, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		return err
	}
	defer drv.Close()

	// The workflow: three steps, each done by an agent; the first two are
	// undone by a compensation agent if a later step fails for good.
	workflow := drover.Workflow{
		Name: "orders",
		Steps: []drover.Step{
			{Name: "reserve", Agent: "inventory", Compensation: "inventory-release", Timeout: 2 * time.Second},
			{Name: "charge", Agent: "payments", Compensation: "payments-refund", Timeout: 2 * time.Second},
			{Name: "ship", Agent: "shipping", Timeout: 2 * time.Second},
		},
		OnFailure: drover.PolicyCompensate,
		// Refuse an order the agents could not read at submission, rather
		// than in the first agent.
		ValidateInput: func(input []byte) error {
			var o order
			if err := json.Unmarshal(input, &o); err != nil {
				return err
			}
			if o.OrderID == "" || o.Amount < 0 {
				return errors.New(`want {"order_id":"o-1","amount":1000}: an order_id and an amount >= 0`)
			}
			return nil
		},
	}
	// Each agent calls one operation of the shop. Retries back off from
	// 20ms, and stop at the step's deadline (its Timeout).
	retry := drover.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond}
	var agents []drover.Agent
	for agent, op := range map[string]string{
		"inventory": "reserve", "inventory-release": "release",
		"payments": "charge", "payments-refund": "refund",
		"shipping": "ship",
	} {
		agents = append(agents, drover.Agent{Name: agent, Func: callShop(shopURL, op), Retry: retry})
	}

	// One client running every role: scheduler, agents and supervisor.
	client, err := drover.New(drover.Config{
		Store:              drv,
		Workflows:          []drover.Workflow{workflow},
		Agents:             agents,
		SupervisorInterval: 200 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	if err := client.Migrate(ctx); err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		if err := client.Stop(context.Background()); err != nil {
			log.Print(err)
		}
	}()

	// Submit a few orders. The task ID makes submission idempotent: the
	// same ID and input again would return the same task.
	var ids []string
	for i := 1; i <= 8; i++ {
		input, _ := json.Marshal(order{OrderID: fmt.Sprintf("o-%d", i), Amount: int64(i * 1000)})
		t, err := client.Submit(ctx, "orders", input, &drover.SubmitOptions{ID: fmt.Sprintf("order-o-%d", i)})
		if err != nil {
			return err
		}
		ids = append(ids, t.ID)
	}

	// Wait for each to be final and print what happened.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, id := range ids {
		t, err := client.Wait(waitCtx, id)
		if err != nil {
			return err
		}
		fmt.Printf("%-10s %-11s", t.ID, t.ProcessState)
		if t.ProcessState == drover.Processed {
			var shipped struct{ Confirmation string }
			_ = json.Unmarshal(t.Output, &shipped)
			fmt.Printf(" shipped, confirmation %s\n", shipped.Confirmation)
			continue
		}
		fmt.Printf(" %s\n", t.LastError)
		for _, st := range t.Steps {
			comp := ""
			if st.CompensationState != "" {
				comp = "compensation " + string(st.CompensationState)
			}
			fmt.Printf("           step %-7s %-9s %s\n", st.Name, st.ProcessState, comp)
		}
	}
	fmt.Printf("\nshop: %s\n", s.stats())
	return nil
}

// callShop returns an agent that calls the shop's operation op with the
// task's input and the step's idempotency key, which is the same on every
// retry of the step: the shop applies a key once.
//
// How the agent reports an outcome decides what drover does next: an
// output ends the step; an error is retried (with back-off, until the
// step's deadline); a drover.Permanent error fails the step for good.
func callShop(shopURL, op string) drover.AgentFunc {
	return func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, shopURL+"/"+op, bytes.NewReader(req.Input))
		if err != nil {
			return nil, drover.Permanent(err)
		}
		r.Header.Set("Idempotency-Key", req.IdempotencyKey)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return nil, err // the network: try again
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		switch {
		case err != nil:
			return nil, err
		case resp.StatusCode >= 500:
			return nil, fmt.Errorf("%s: %s", op, resp.Status) // the shop's trouble: try again
		case resp.StatusCode >= 400:
			return nil, drover.Permanent(fmt.Errorf("%s: %s", op, strings.TrimSpace(string(body))))
		}
		return body, nil
	}
}

// shop is the remote service of the example: POST /{operation} with an
// order as the body and an Idempotency-Key header. It fails now and then:
// one call in five answers 503 before doing anything, and one in five
// does the work but its answer is lost (504), as when a connection drops. A
// retry with the same key gets the first answer without doing the work
// again. It declines (402) to charge more than 5000.
type shop struct {
	mu      sync.Mutex
	rng     *rand.Rand
	answers map[string][]byte // idempotency key → the answer of the call that did the work
	done    map[string]int    // "operation order_id" → times done
	calls   int
	deduped int
}

func newShop() *shop {
	return &shop{rng: rand.New(rand.NewPCG(1, 2)), answers: map[string][]byte{}, done: map[string]int{}}
}

func (s *shop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, key := strings.TrimPrefix(r.URL.Path, "/"), r.Header.Get("Idempotency-Key")
	var o order
	if r.Method != http.MethodPost || key == "" || json.NewDecoder(r.Body).Decode(&o) != nil {
		http.Error(w, "want POST /{operation} with an Idempotency-Key and an order", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if answer, ok := s.answers[key]; ok {
		s.deduped++
		_, _ = w.Write(answer) // a client that hung up is not the shop's concern
		return
	}
	roll := s.rng.Float64()
	switch {
	case roll < 0.2:
		http.Error(w, "busy, try again", http.StatusServiceUnavailable)
		return
	case op == "charge" && o.Amount > 5000:
		http.Error(w, fmt.Sprintf("card declined for %d", o.Amount), http.StatusPaymentRequired)
		return
	}
	s.done[op+" "+o.OrderID]++
	answer, _ := json.Marshal(map[string]string{
		"operation": op, "order_id": o.OrderID, "confirmation": fmt.Sprintf("%s-%s", op, o.OrderID),
	})
	s.answers[key] = answer
	if roll < 0.4 {
		http.Error(w, "the answer was lost", http.StatusGatewayTimeout)
		return
	}
	_, _ = w.Write(answer)
}

// stats says how many calls the shop answered, how much work it did and
// how many pieces of work were done more than once (never, thanks to the
// idempotency keys).
func (s *shop) stats() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	twice := 0
	for _, n := range s.done {
		if n > 1 {
			twice++
		}
	}
	return fmt.Sprintf("%d calls, %d operations done, %d retries answered from the idempotency keys, %d operations done twice",
		s.calls, len(s.done), s.deduped, twice)
}
