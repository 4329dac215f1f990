package engine

import (
	"context"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/store"
)

// Remote is the state transitions of agents that run in other processes
// and reach drover over the HTTP API (package httpapi): claim requests
// under a claim of their own, then complete, fail or give back each one
// under that claim. Every transition is one transaction and notifies the
// role it makes work for; a claim that no longer holds (completed, given
// to another agent, past CompleteBy) fails with store.ErrStale or
// store.ErrNotFound. It is what package convoy's leases are to remote
// session consumers.
type Remote struct {
	Store store.Driver
	// Clock tells the time written and checked against CompleteBy.
	Clock clock.Clock
}

// Available reports whether agent has an unclaimed request ready: a
// cheap read that takes no write lock, for long-polls to call before
// Claim.
func (r Remote) Available(ctx context.Context, agent string) (bool, error) {
	return r.Store.Reader().RequestAvailable(ctx, &store.RequestAvailableParams{Agent: agent, Now: r.Clock.Now()})
}

// Claim claims up to limit requests for agent under claimedBy.
func (r Remote) Claim(ctx context.Context, agent, claimedBy string, limit int) ([]*dt.AgentRequest, error) {
	var reqs []*dt.AgentRequest
	err := r.Store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		var err error
		reqs, err = x.RequestClaim(ctx, &store.RequestClaimParams{Agent: agent, ClaimedBy: claimedBy, Now: r.Clock.Now(), Limit: limit})
		return err
	})
	return reqs, err
}

// ReleaseAll gives back every request claimed under claimedBy (a poll
// whose client went away) and wakes agent's other polls.
func (r Remote) ReleaseAll(ctx context.Context, agent, claimedBy string) error {
	return r.Store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if _, err := x.RequestRelease(ctx, &store.RequestReleaseParams{ClaimedBy: claimedBy}); err != nil {
			return err
		}
		return store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicRequests(agent)})
	})
}

// Release gives request id back so that any agent may claim it again
// after the redelivery delay (a transient failure). check, when not nil,
// may refuse the request: its error rolls the release back. Without a
// delay the agent's polls are woken at once; with one they find the
// request at a later look.
func (r Remote) Release(ctx context.Context, id int64, claimedBy string, after store.Redelivery, check func(*dt.AgentRequest) error) error {
	return r.Store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		q, err := x.RequestReleaseOne(ctx, &store.RequestReleaseOneParams{ID: id, ClaimedBy: claimedBy, Now: r.Clock.Now(), Redelivery: after})
		if err == nil && check != nil {
			err = check(q)
		}
		if err != nil || after.First > 0 {
			return err
		}
		return store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicRequests(q.Agent)})
	})
}

// Defer gives request id back, to be claimed again after the redelivery
// delay, without waking anyone: for a request the caller could not
// prepare yet (waking its own poll would only repeat the failure).
func (r Remote) Defer(ctx context.Context, id int64, claimedBy string, after store.Redelivery) error {
	return r.Store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, err := x.RequestReleaseOne(ctx, &store.RequestReleaseOneParams{ID: id, ClaimedBy: claimedBy, Now: r.Clock.Now(), Redelivery: after})
		return err
	})
}

// Complete ends request id with output: the reply goes to the scheduler
// that holds the task, in the same transaction. check as for Release.
func (r Remote) Complete(ctx context.Context, id int64, claimedBy string, output []byte, check func(*dt.AgentRequest) error) error {
	return r.reply(ctx, id, claimedBy, output, "", false, check)
}

// Fail ends request id with a permanent failure: the task's failure
// policy applies. check as for Release.
func (r Remote) Fail(ctx context.Context, id int64, claimedBy, reason string, check func(*dt.AgentRequest) error) error {
	return r.reply(ctx, id, claimedBy, nil, reason, true, check)
}

func (r Remote) reply(ctx context.Context, id int64, claimedBy string, output []byte, failure string, failed bool, check func(*dt.AgentRequest) error) error {
	return r.Store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		now := r.Clock.Now()
		q, err := x.RequestComplete(ctx, &store.RequestCompleteParams{ID: id, ClaimedBy: claimedBy, Now: now})
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(q); err != nil {
				return err
			}
		}
		reply := &dt.AgentReply{TaskID: q.TaskID, StepIndex: q.StepIndex, Attempt: q.Attempt, Kind: q.Kind,
			Output: output, Failed: failed, Error: failure, CreatedAt: now, Scheduler: q.Scheduler}
		if err := x.ReplyInsertMany(ctx, &store.ReplyInsertManyParams{Replies: []*dt.AgentReply{reply}}); err != nil {
			return err
		}
		return store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicReplies(q.Scheduler)})
	})
}

// PresencePrefix begins the name of every remote agent's presence lease,
// PresencePrefix + agent + "/" + poller: a lease per agent and poller,
// held by the server it polls, that any process can list.
const PresencePrefix = "agent-poll:"

// Present records that poller (who polls: a token's name) is waiting for
// agent's requests through holder (the instance ID of the server it
// polls), until ttl from now. When another server holds the lease, the
// poller is already shown as connected through it and nothing changes.
func (r Remote) Present(ctx context.Context, agent, poller, holder string, ttl time.Duration) error {
	return r.Store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		_, _, err := x.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: PresencePrefix + agent + "/" + poller, Holder: holder, Now: r.Clock.Now(), TTL: ttl})
		return err
	})
}
