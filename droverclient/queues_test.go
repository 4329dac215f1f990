package droverclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/store"
)

func TestQueues(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sub, op := e.client(t, submitTok), e.client(t, operatorTok)

	// One message, then a batch; session IDs with "/", also leading.
	pub, err := sub.Publish(ctx, "orders", droverclient.PublishMessage{SessionID: "a/b", Body: json.RawMessage(`{"op":"create"}`), MessageID: "m-1"})
	if err != nil || len(pub) != 1 || pub[0].Seq != 1 || pub[0].Duplicate || pub[0].SessionID != "a/b" {
		t.Fatalf("publish: %+v %v", pub, err)
	}
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	pub, err = sub.Publish(ctx, "orders",
		droverclient.PublishMessage{SessionID: "a/b", Body: json.RawMessage(`"pay"`)},
		droverclient.PublishMessage{SessionID: "/lead", Body: nil, EndOfSequence: true, NotBefore: &later})
	if err != nil || len(pub) != 2 || pub[0].Seq != 2 || pub[1].Seq != 1 || pub[1].SessionID != "/lead" {
		t.Fatalf("batch: %+v %v", pub, err)
	}
	dup, err := sub.Publish(ctx, "orders", droverclient.PublishMessage{SessionID: "a/b", Body: json.RawMessage(`{}`), MessageID: "m-1"})
	if err != nil || !dup[0].Duplicate || dup[0].Seq != 1 {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	// The session is closed: 409.
	_, err = sub.Publish(ctx, "orders", droverclient.PublishMessage{SessionID: "/lead", Body: json.RawMessage(`1`)})
	wantAPIError(t, err, 409, "", droverclient.ErrConflict)
	_, err = sub.Publish(ctx, "orders", droverclient.PublishMessage{Body: json.RawMessage(`1`)})
	wantAPIError(t, err, 400, "invalid_field", droverclient.ErrInvalid)
	if _, err := sub.Publish(ctx, "orders"); err == nil {
		t.Fatal("Publish without messages: no error")
	}

	qs, err := sub.Queues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Name != "orders" || qs[0].MaxDeliveryCount == 0 || qs[0].PoisonPolicy == "" || qs[0].LockDurationMS == 0 {
		t.Fatalf("queues: %+v %v", qs, err)
	}

	ss, err := sub.Sessions(ctx, "orders", "", 1)
	if err != nil || len(ss.Sessions) != 1 || ss.Sessions[0].ID != "/lead" || ss.NextAfter != "/lead" || !ss.Sessions[0].Closed {
		t.Fatalf("sessions page 1: %+v %v", ss, err)
	}
	ss, err = sub.Sessions(ctx, "orders", ss.NextAfter, 0)
	if err != nil || len(ss.Sessions) != 1 || ss.Sessions[0].ID != "a/b" || ss.Sessions[0].Pending != 2 || ss.Sessions[0].NextSeq != 2 || ss.NextAfter != "" {
		t.Fatalf("sessions page 2: %+v %v", ss, err)
	}
	_, err = sub.Sessions(ctx, "nope", "", 0)
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)

	pk, err := sub.Peek(ctx, "orders", "a/b", 0, 1)
	if err != nil || len(pk.Messages) != 1 || string(pk.Messages[0].Body) != `{"op":"create"}` || pk.Messages[0].MessageID != "m-1" || pk.NextFromSeq != 2 {
		t.Fatalf("peek: %+v %v", pk, err)
	}
	pk, err = sub.Peek(ctx, "orders", "a/b", pk.NextFromSeq, 0)
	if err != nil || len(pk.Messages) != 1 || string(pk.Messages[0].Body) != `"pay"` || pk.NextFromSeq != 0 {
		t.Fatalf("peek 2: %+v %v", pk, err)
	}
	// (A session ID starting with "/" cannot be peeked: the server refuses
	// the "//" its decoded path holds. Listing shows it.)
	_, err = sub.Peek(ctx, "orders", "none", 0, 0)
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)

	// Dead-letter a/b's head through a receiver.
	rc, err := e.q.AcceptSession(ctx, "orders", "a/b")
	if err != nil {
		t.Fatal(err)
	}
	m, err := rc.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.DeadLetter(ctx, m, "bad"); err != nil {
		t.Fatal(err)
	}
	_ = rc.Close(ctx)
	dl, err := sub.DeadLetters(ctx, "orders", droverclient.DeadLetterParams{Session: "a/b"})
	if err != nil || len(dl.DeadLetters) != 1 || dl.DeadLetters[0].Seq != 1 || dl.DeadLetters[0].DeadReason != "bad" || !dl.DeadLetters[0].Dead || dl.Next != nil {
		t.Fatalf("dead letters: %+v %v", dl, err)
	}
	dl, err = sub.DeadLetters(ctx, "orders", droverclient.DeadLetterParams{Limit: 1})
	if err != nil || dl.Next == nil || dl.Next.AfterSession != "a/b" || dl.Next.AfterSeq != 1 {
		t.Fatalf("dead letters limit 1: %+v %v", dl, err)
	}
	dl, err = sub.DeadLetters(ctx, "orders", droverclient.DeadLetterParams{After: dl.Next})
	if err != nil || len(dl.DeadLetters) != 0 {
		t.Fatalf("dead letters after the cursor: %+v %v", dl, err)
	}
	_, err = sub.DeadLetters(ctx, "nope", droverclient.DeadLetterParams{})
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)

	err = sub.ResubmitDeadLetter(ctx, "orders", "a/b", 1)
	wantAPIError(t, err, 403, "forbidden", droverclient.ErrForbidden)
	if err := op.ResubmitDeadLetter(ctx, "orders", "a/b", 1); err != nil {
		t.Fatal(err)
	}
	err = op.ResubmitDeadLetter(ctx, "orders", "a/b", 1)
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
	ss, _ = sub.Sessions(ctx, "orders", "/lead", 0)
	if ss.Sessions[0].Blocked {
		t.Fatalf("still blocked after resubmit: %+v", ss.Sessions[0])
	}

	// Dead-letter it again and discard it.
	rc, err = e.q.AcceptSession(ctx, "orders", "a/b")
	if err != nil {
		t.Fatal(err)
	}
	if m, err = rc.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rc.DeadLetter(ctx, m, "bad again"); err != nil {
		t.Fatal(err)
	}
	_ = rc.Close(ctx)
	if err := op.DiscardDeadLetter(ctx, "orders", "a/b", 1); err != nil {
		t.Fatal(err)
	}
	err = op.DiscardDeadLetter(ctx, "orders", "a/b", 1)
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
	pk, err = sub.Peek(ctx, "orders", "a/b", 0, 0)
	if err != nil || len(pk.Messages) != 1 || pk.Messages[0].Seq != 2 {
		t.Fatalf("peek after discard: %+v %v", pk, err)
	}
}

// The server lists queues a page at a time; Queues reads every page.
func TestQueuesPages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sub := e.client(t, submitTok)
	// 1002 queues in one transaction: more than one page of Queues.
	msgs := make([]store.PublishMessage, 1002)
	for i := range msgs {
		msgs[i] = store.PublishMessage{Queue: fmt.Sprintf("q%04d", i), SessionID: "s", Body: []byte("1")}
	}
	if err := e.d.Store().InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, err := x.MessagePublishMany(ctx, &store.MessagePublishManyParams{Messages: msgs, Now: time.Now()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	page, err := sub.QueuesPage(ctx, "", 2)
	if err != nil || len(page.Queues) != 2 || page.Queues[1].Name != "q0001" || page.NextAfter != "q0001" {
		t.Fatalf("first page: %+v %v", page, err)
	}
	page, err = sub.QueuesPage(ctx, "q0999", 0)
	if err != nil || len(page.Queues) != 2 || page.Queues[0].Name != "q1000" || page.NextAfter != "" {
		t.Fatalf("last page: %+v %v", page, err)
	}
	page, err = sub.QueuesPage(ctx, "", 0)
	if err != nil || len(page.Queues) != 100 || page.NextAfter != "q0099" {
		t.Fatalf("default page: %d queues, next %q, %v", len(page.Queues), page.NextAfter, err)
	}
	qs, err := sub.Queues(ctx)
	if err != nil || len(qs) != 1002 || qs[1001].Name != "q1001" {
		t.Fatalf("queues: %d %v", len(qs), err)
	}
	_, err = sub.QueuesPage(ctx, "a/b", 0)
	wantAPIError(t, err, 400, "invalid_parameter", droverclient.ErrInvalid)
}
