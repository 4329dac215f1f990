package orders

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/remotesim"
)

// WorkflowName is the name of the workflow Workflow returns.
const WorkflowName = "orders"

// Agent names. The operation each one calls on the remote service is given in
// its comment.
const (
	AgentInventory        = "inventory"         // reserve
	AgentInventoryRelease = "inventory-release" // release
	AgentPayments         = "payments"          // charge
	AgentPaymentsRefund   = "payments-refund"   // refund
	AgentShipping         = "shipping"          // ship
)

// Step names, in order.
const (
	StepReserve = "reserve"
	StepCharge  = "charge"
	StepShip    = "ship"
)

// DefaultStepTimeout is each step's time budget when Options.StepTimeout is 0.
const DefaultStepTimeout = 2 * time.Second

// DefaultFailureThreshold is the workflow's FailureThreshold when
// Options.FailureThreshold is 0.
const DefaultFailureThreshold = 3

// MaxOrderIDLen caps the length of an order ID.
const MaxOrderIDLen = 200

// Options configure the workflow and its agents. The zero value is usable.
type Options struct {
	// StepTimeout is every step's time budget (its CompleteBy is dispatch
	// time plus StepTimeout). Default DefaultStepTimeout.
	StepTimeout time.Duration
	// RetryDelay is how long a step recovered by the supervisor waits before
	// it is claimed again, doubled on each further failure. Default 0.
	RetryDelay time.Duration
	// FailureThreshold is the number of timeouts after which a step fails for
	// good and the order is compensated. Default DefaultFailureThreshold.
	FailureThreshold int

	// Retry is the agents' retry policy inside a step's deadline.
	Retry drover.RetryPolicy
	// Breaker is the agents' circuit-breaker policy.
	Breaker drover.BreakerPolicy
	// Concurrency is how many calls each agent makes at once in one process;
	// 0 for drover's default.
	Concurrency int
	// CallTimeout, if set, bounds each single call to the remote service, so
	// a call that never answers is retried by the agent inside the step's
	// deadline instead of being left to the supervisor. Default 0: a call
	// may use the whole step budget.
	CallTimeout time.Duration
	// HTTPClient is the HTTP client the agents use; default a client made by
	// remotesim.NewClient.
	HTTPClient *http.Client
}

// Workflow returns the orders workflow: reserve (agent inventory, compensated
// by inventory-release), charge (agent payments, compensated by
// payments-refund), ship (agent shipping); OnFailure compensate.
func Workflow(opts Options) drover.Workflow {
	timeout := opts.StepTimeout
	if timeout <= 0 {
		timeout = DefaultStepTimeout
	}
	threshold := opts.FailureThreshold
	if threshold <= 0 {
		threshold = DefaultFailureThreshold
	}
	return drover.Workflow{
		Name: WorkflowName,
		Steps: []drover.Step{
			{Name: StepReserve, Agent: AgentInventory, Compensation: AgentInventoryRelease, Timeout: timeout},
			{Name: StepCharge, Agent: AgentPayments, Compensation: AgentPaymentsRefund, Timeout: timeout},
			{Name: StepShip, Agent: AgentShipping, Timeout: timeout},
		},
		FailureThreshold: threshold,
		OnFailure:        drover.PolicyCompensate,
		RetryDelay:       opts.RetryDelay,
		// An order that cannot be parsed would fail in its first agent
		// and be compensated: refuse it at submission instead.
		ValidateInput: func(input []byte) error {
			_, err := ParseOrder(input)
			return err
		},
	}
}

// AgentNames lists every agent the workflow names, for Config.ExternalAgents
// in a process that schedules orders but runs no agents.
func AgentNames() []string {
	return []string{AgentInventory, AgentInventoryRelease, AgentPayments, AgentPaymentsRefund, AgentShipping}
}

// Agents returns the five agents of the workflow, calling the remote service
// at remoteBaseURL (for example "http://127.0.0.1:8080").
//
// Each agent decodes the order from the task input (an invalid order is a
// permanent error), calls its operation with the step's idempotency key and
// returns the service's JSON response as the step output. A 4xx answer is a
// permanent error; anything else (5xx, a network error, a deadline) is
// transient and retried by the agent runtime until the step's CompleteBy.
func Agents(remoteBaseURL string, opts Options) []drover.Agent {
	c := remotesim.NewClient(remoteBaseURL)
	if opts.HTTPClient != nil {
		c.HTTP = opts.HTTPClient
	}
	mk := func(name, op string) drover.Agent {
		return drover.Agent{
			Name:        name,
			Func:        callFunc(c, op, opts.CallTimeout),
			Concurrency: opts.Concurrency,
			Retry:       opts.Retry,
			Breaker:     opts.Breaker,
		}
	}
	return []drover.Agent{
		mk(AgentInventory, "reserve"),
		mk(AgentInventoryRelease, "release"),
		mk(AgentPayments, "charge"),
		mk(AgentPaymentsRefund, "refund"),
		mk(AgentShipping, "ship"),
	}
}

func callFunc(c *remotesim.Client, op string, callTimeout time.Duration) drover.AgentFunc {
	return func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
		o, err := ParseOrder(req.Input)
		if err != nil {
			return nil, drover.Permanent(err)
		}
		if callTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, callTimeout)
			defer cancel()
		}
		resp, err := c.Call(ctx, op, req.IdempotencyKey, o.OrderID, o.Amount)
		if err != nil {
			if remotesim.IsPermanent(err) {
				return nil, drover.Permanent(err)
			}
			return nil, err
		}
		out, err := json.Marshal(resp)
		if err != nil {
			return nil, drover.Permanent(fmt.Errorf("orders: encode %s response: %w", op, err))
		}
		return out, nil
	}
}

// Order is the task input of the orders workflow.
type Order struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

// ErrInvalidOrder is wrapped by every error of ParseOrder.
var ErrInvalidOrder = errors.New("invalid order")

// ParseOrder decodes and validates an order: a JSON object with a non-empty
// string order_id (at most MaxOrderIDLen bytes) and a non-negative integer
// amount, and nothing else.
func ParseOrder(input []byte) (Order, error) {
	var raw struct {
		OrderID *string `json:"order_id"`
		Amount  *int64  `json:"amount"`
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = []byte("null")
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Order{}, fmt.Errorf(`%w: %v (want {"order_id":"o-1","amount":1234})`, ErrInvalidOrder, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Order{}, fmt.Errorf("%w: data after the JSON object", ErrInvalidOrder)
	}
	switch {
	case raw.OrderID == nil && raw.Amount == nil:
		return Order{}, fmt.Errorf(`%w: missing order_id and amount (want {"order_id":"o-1","amount":1234})`, ErrInvalidOrder)
	case raw.OrderID == nil:
		return Order{}, fmt.Errorf("%w: missing order_id", ErrInvalidOrder)
	case raw.Amount == nil:
		return Order{}, fmt.Errorf("%w: missing amount", ErrInvalidOrder)
	case *raw.OrderID == "":
		return Order{}, fmt.Errorf("%w: order_id is empty", ErrInvalidOrder)
	case len(*raw.OrderID) > MaxOrderIDLen:
		return Order{}, fmt.Errorf("%w: order_id is %d bytes, the limit is %d", ErrInvalidOrder, len(*raw.OrderID), MaxOrderIDLen)
	case *raw.Amount < 0:
		return Order{}, fmt.Errorf("%w: amount %d is negative", ErrInvalidOrder, *raw.Amount)
	}
	return Order{OrderID: *raw.OrderID, Amount: *raw.Amount}, nil
}

// Input encodes an order as the workflow's task input.
func Input(orderID string, amount int64) []byte {
	b, _ := json.Marshal(Order{OrderID: orderID, Amount: amount}) // cannot fail
	return b
}
