package droverclient_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover/droverclient"
)

func TestPolicyAndConsumer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sub, op := e.client(t, submitTok), e.client(t, operatorTok)

	_, err := sub.Policy(ctx, "jobs")
	wantAPIError(t, err, 404, "not_found", droverclient.ErrNotFound)
	two, skip := 2, "skip"
	_, _, err = sub.SetPolicy(ctx, "jobs", droverclient.PolicyChange{MaxDeliveryCount: &two})
	wantAPIError(t, err, 403, "forbidden", droverclient.ErrForbidden)
	q, created, err := op.SetPolicy(ctx, "jobs", droverclient.PolicyChange{MaxDeliveryCount: &two, PoisonPolicy: &skip})
	if err != nil || !created || q.MaxDeliveryCount != 2 || q.PoisonPolicy != "skip" {
		t.Fatalf("SetPolicy: %+v %v %v", q, created, err)
	}
	zero := int64(0)
	q, created, err = op.SetPolicy(ctx, "jobs", droverclient.PolicyChange{DedupeWindowMS: &zero})
	if err != nil || created || q.DedupeWindowMS != 0 || q.MaxDeliveryCount != 2 {
		t.Fatalf("SetPolicy again: %+v %v %v", q, created, err)
	}
	bad := "drop"
	_, _, err = op.SetPolicy(ctx, "jobs", droverclient.PolicyChange{PoisonPolicy: &bad})
	wantAPIError(t, err, 400, "invalid_field", droverclient.ErrInvalid)
	if got, err := sub.Policy(ctx, "jobs"); err != nil || *got != *q {
		t.Fatalf("Policy: %+v %v", got, err)
	}

	// Nothing published yet: the accept's wait ends with no lease.
	if l, err := sub.Accept(ctx, "jobs", 20*time.Millisecond); err != nil || l != nil {
		t.Fatalf("empty Accept: %+v %v", l, err)
	}
	if _, err := sub.Publish(ctx, "jobs",
		droverclient.PublishMessage{SessionID: "j/1", Body: json.RawMessage(`{"n":1}`)},
		droverclient.PublishMessage{SessionID: "j/1", Body: json.RawMessage(`2`), EndOfSequence: true}); err != nil {
		t.Fatal(err)
	}
	l, err := sub.Accept(ctx, "jobs", time.Second)
	if err != nil || l == nil || l.Session != "j/1" || !strings.Contains(l.LockToken, ".") || l.LockDuration <= 0 {
		t.Fatalf("Accept: %+v %v", l, err)
	}
	_, err = sub.AcceptSession(ctx, "jobs", "j/1")
	wantAPIError(t, err, 409, "session_locked", droverclient.ErrConflict)
	r, err := sub.Receive(ctx, l, 0)
	if err != nil || r.Message == nil || r.Message.Seq != 1 || string(r.Message.Body) != `{"n":1}` || r.Message.DeliveryCount != 1 {
		t.Fatalf("Receive: %+v %v", r, err)
	}
	if err := sub.Settle(ctx, l, 1, droverclient.Settlement{Outcome: droverclient.Abandon, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Abandoned for an hour: nothing to receive now.
	if r, err := sub.Receive(ctx, l, 10*time.Millisecond); err != nil || r.Message != nil || r.Blocked || r.Ended {
		t.Fatalf("Receive after the abandon: %+v %v", r, err)
	}
	err = sub.Settle(ctx, l, 2, droverclient.Settlement{Outcome: droverclient.Complete})
	wantAPIError(t, err, 409, "not_head", droverclient.ErrConflict)
	if droverclient.IsLockLost(err) {
		t.Fatal("not_head counted as a lost lock")
	}
	// The token's number with another nonce does not open the lease.
	forged := *l
	forged.LockToken = l.LockToken[:strings.IndexByte(l.LockToken, '.')+1] + strings.Repeat("0", 32)
	if err := sub.Renew(ctx, &forged); !droverclient.IsLockLost(err) {
		t.Fatalf("Renew with a forged nonce: %v", err)
	}
	before := l.LockedUntil
	if err := sub.Renew(ctx, l); err != nil || l.LockedUntil.Before(before) {
		t.Fatalf("Renew: %v %v -> %v", err, before, l.LockedUntil)
	}
	if err := sub.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	err = sub.Renew(ctx, l)
	if !droverclient.IsLockLost(err) {
		t.Fatalf("Renew after Release: %v", err)
	}
	wantAPIError(t, err, 409, "lock_lost", droverclient.ErrConflict)
	if _, err := sub.Receive(ctx, &droverclient.Lease{Queue: "jobs"}, 0); err == nil {
		t.Fatal("Receive without a lease: no error")
	}
	if _, err := sub.Accept(ctx, "jobs", time.Minute+time.Millisecond); err == nil {
		t.Fatal("Accept with a wait over 60s: no error")
	}
}
