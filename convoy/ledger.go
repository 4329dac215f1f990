package convoy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/drover-run/drover/store"
)

// Ledger is one ledger message: transactions for many orders, interleaved,
// in ledger order.
type Ledger struct {
	ID           string
	Transactions []LedgerTransaction
}

// LedgerTransaction is one transaction of a ledger.
type LedgerTransaction struct {
	// ID is unique within its ledger.
	ID string
	// OrderID is the session the transaction is published to.
	OrderID string
	// Body is published as the message body.
	Body []byte
	// EndOfSequence publishes the transaction as its order's last message.
	EndOfSequence bool
}

// LedgerOptions configure a ledger processor.
type LedgerOptions struct {
	// LedgerQueue is the queue of ledger messages. Required.
	LedgerQueue string
	// TargetQueue is the session queue the transactions go to, one session
	// per order ID. Required.
	TargetQueue string
	// Decode parses a ledger message body. Default DecodeJSONLedger. An
	// error dead-letters the ledger message, the error's text being the
	// reason.
	Decode func(body []byte) (*Ledger, error)
	// AfterPublish, when set, runs in the same transaction after the
	// ledger's transactions were published and before the ledger message
	// is completed (to record the ledger in application tables, say). An
	// error rolls everything back; the ledger message is delivered again.
	// The ledgers of one round are all published first, in one call, then
	// AfterPublish runs for each in turn, with the ledger's own results.
	AfterPublish func(ctx context.Context, x store.Executor, l *Ledger, published []Published) error
	// Processor tunes the processor of the ledger queue.
	Processor ProcessorOptions
}

// LedgerProcessor is the ledger processor of the Sequential Convoy
// pattern: it consumes a ledger queue, walks each ledger one transaction at a
// time and publishes every transaction to the target queue with its order ID
// as the session ID, in ledger order, in the same store transaction that
// completes the ledger message (a Processor with a HandlerTx). A crash at any
// point therefore neither loses nor duplicates a transaction: either the
// ledger message is completed and every transaction published, or neither.
// As a second line of defence every transaction is published with message ID
// "<ledger ID>/<transaction ID>", so the same ledger published twice within
// the target queue's dedupe window yields each transaction once.
//
// The ledgers a round receives are published together, in ledger-queue
// order, in one call: on PostgreSQL that locks (or creates) every order
// session of the round in one pass in key order, so processors sharing
// order sessions never deadlock each other. Each ledger's transactions get
// the sequence numbers they would get if the ledgers were published one
// after the other.
//
// A malformed ledger (undecodable, no ledger ID, a transaction without ID or
// order ID, a duplicate transaction ID, an invalid order ID or body) is
// dead-lettered with a reason naming the problem, as is a ledger whose
// transaction targets a closed (ended) order session.
type LedgerProcessor struct {
	*Processor
	c *Client
	o LedgerOptions
}

// NewLedgerProcessor returns a ledger processor. Start runs it.
func NewLedgerProcessor(c *Client, o LedgerOptions) (*LedgerProcessor, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: Client is nil", ErrInvalidConfig)
	}
	if err := checkQueue(o.LedgerQueue); err != nil {
		return nil, fmt.Errorf("LedgerQueue: %w", err)
	}
	if err := checkQueue(o.TargetQueue); err != nil {
		return nil, fmt.Errorf("TargetQueue: %w", err)
	}
	if o.LedgerQueue == o.TargetQueue {
		return nil, fmt.Errorf("%w: LedgerQueue and TargetQueue are both %q", ErrInvalidConfig, o.LedgerQueue)
	}
	if o.Decode == nil {
		o.Decode = DecodeJSONLedger
	}
	lp := &LedgerProcessor{c: c, o: o}
	p, err := NewProcessorTx(c, o.LedgerQueue, lp.handle, o.Processor)
	if err != nil {
		return nil, err
	}
	p.htxRound = lp.handleRound
	lp.Processor = p
	return lp, nil
}

// handle publishes one ledger's transactions inside the round's transaction.
// It serves when handleRound cannot tell which ledger failed.
func (lp *LedgerProcessor) handle(ctx context.Context, x store.Executor, m *ReceivedMessage) error {
	l, msgs, err := lp.parse(m)
	if err != nil {
		return err
	}
	var pub []Published
	if len(msgs) > 0 {
		pub, err = lp.c.PublishWith(ctx, x, lp.o.TargetQueue, msgs...)
		if errors.Is(err, ErrSessionClosed) {
			return DeadLetterError(fmt.Errorf("ledger %q: %w", l.ID, err))
		}
		if err != nil {
			return fmt.Errorf("ledger %q: publish: %w", l.ID, err)
		}
	}
	if lp.o.AfterPublish != nil {
		return lp.o.AfterPublish(ctx, x, l, pub)
	}
	return nil
}

// handleRound publishes the ledgers of a round in ONE call, in round order,
// then runs AfterPublish for each. One call locks (or creates) all their
// order sessions in one pass in key order: published ledger by ledger, two
// rounds sharing orders could each hold one the other waits for, a
// deadlock. Ledger i's messages get the same results as if published on
// their own after ledgers 0..i-1. When the call finds a closed session and
// more than one ledger published, errOneByOne redoes the round ledger by
// ledger, which dead-letters the one at fault.
func (lp *LedgerProcessor) handleRound(ctx context.Context, x store.Executor, ms []*ReceivedMessage) (int, error) {
	ledgers := make([]*Ledger, len(ms))
	ends := make([]int, len(ms)) // ledger i's messages end at all[ends[i]]
	var (
		all     []Message
		senders int // ledgers with messages
		last    int
	)
	for i, m := range ms {
		l, msgs, err := lp.parse(m)
		if err != nil {
			return i, err
		}
		if len(msgs) > 0 {
			senders, last = senders+1, i
		}
		ledgers[i], all, ends[i] = l, append(all, msgs...), len(all)+len(msgs)
	}
	var pub []Published
	if len(all) > 0 {
		var err error
		pub, err = lp.c.PublishWith(ctx, x, lp.o.TargetQueue, all...)
		switch {
		case errors.Is(err, ErrSessionClosed) && senders == 1:
			return last, DeadLetterError(fmt.Errorf("ledger %q: %w", ledgers[last].ID, err))
		case errors.Is(err, ErrSessionClosed):
			return -1, errOneByOne
		case err != nil:
			return -1, fmt.Errorf("publish %d ledgers: %w", len(ms), err)
		}
	}
	if lp.o.AfterPublish != nil {
		start := 0
		for i, l := range ledgers {
			var p []Published // nil for a ledger without transactions, as in handle
			if ends[i] > start {
				p = pub[start:ends[i]:ends[i]]
			}
			if err := lp.o.AfterPublish(ctx, x, l, p); err != nil {
				return i, err
			}
			start = ends[i]
		}
	}
	return 0, nil
}

// parse decodes and validates a ledger message; errors dead-letter it.
func (lp *LedgerProcessor) parse(m *ReceivedMessage) (*Ledger, []Message, error) {
	l, err := lp.o.Decode(m.Body)
	if err != nil {
		return nil, nil, DeadLetterError(fmt.Errorf("malformed ledger: %w", err))
	}
	msgs, err := lp.messages(l)
	if err != nil {
		return nil, nil, DeadLetterError(fmt.Errorf("malformed ledger %q: %w", l.ID, err))
	}
	return l, msgs, nil
}

// messages validates a ledger and builds its messages, in ledger order.
func (lp *LedgerProcessor) messages(l *Ledger) ([]Message, error) {
	if l == nil || l.ID == "" {
		return nil, errors.New("ledger ID is missing")
	}
	if p := idProblem(l.ID, MaxMessageIDLen); p != "" {
		return nil, fmt.Errorf("ledger ID %s", p)
	}
	seen := make(map[string]int, len(l.Transactions))
	msgs := make([]Message, len(l.Transactions))
	for i, t := range l.Transactions {
		switch {
		case t.ID == "":
			return nil, fmt.Errorf("transaction %d: id is missing", i)
		case t.OrderID == "":
			return nil, fmt.Errorf("transaction %d (id %q): order_id is missing", i, t.ID)
		}
		if j, dup := seen[t.ID]; dup {
			return nil, fmt.Errorf("transaction %d: id %q is also the id of transaction %d", i, t.ID, j)
		}
		seen[t.ID] = i
		m := Message{SessionID: t.OrderID, Body: t.Body, MessageID: l.ID + "/" + t.ID, EndOfSequence: t.EndOfSequence}
		if err := lp.c.checkMessage(m); err != nil {
			return nil, fmt.Errorf("transaction %d (id %q): %w", i, t.ID, err)
		}
		msgs[i] = m
	}
	return msgs, nil
}

// jsonLedger is the default ledger format.
type jsonLedger struct {
	LedgerID     *string `json:"ledger_id"`
	Transactions []struct {
		ID            string          `json:"id"`
		OrderID       string          `json:"order_id"`
		Body          json.RawMessage `json:"body"`
		EndOfSequence bool            `json:"end_of_sequence"`
	} `json:"transactions"`
}

// DecodeJSONLedger is the default ledger format:
//
//	{"ledger_id": "L-1", "transactions": [
//	  {"id": "t1", "order_id": "o-17", "body": {"op": "create"}},
//	  {"id": "t2", "order_id": "o-18", "body": {"op": "create"}, "end_of_sequence": false}
//	]}
//
// Each transaction's body (any JSON value, absent for none) is published as
// it stands in the ledger. Other fields are ignored.
func DecodeJSONLedger(body []byte) (*Ledger, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var j jsonLedger
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf("not a JSON ledger: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a JSON ledger: data after the ledger object")
	}
	if j.LedgerID == nil || *j.LedgerID == "" {
		return nil, errors.New("ledger_id is missing")
	}
	if j.Transactions == nil {
		return nil, errors.New("transactions is missing")
	}
	l := &Ledger{ID: *j.LedgerID, Transactions: make([]LedgerTransaction, len(j.Transactions))}
	for i, t := range j.Transactions {
		l.Transactions[i] = LedgerTransaction{ID: t.ID, OrderID: t.OrderID, Body: t.Body, EndOfSequence: t.EndOfSequence}
	}
	return l, nil
}
