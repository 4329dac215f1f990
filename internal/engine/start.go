package engine

import (
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/agentrt"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/scheduler"
)

// Start is an eager start in progress: room reserved on one scheduler
// for tasks a Submit transaction is to start (flow.SubmitAndStart with
// Flow), and what to do after that transaction.
type Start struct {
	// Flow is the state machine's view of the start, for the transaction.
	Flow *flow.Start

	e     *Engine
	sched *scheduler.Scheduler
	rt    *agentrt.Runtime
	done  bool
}

// BeginStart reserves room for up to n tasks on the first scheduler that
// accepts and has room, or returns nil: none has.
func (e *Engine) BeginStart(n int) *Start {
	if n == 0 {
		return nil
	}
	for _, s := range e.order {
		if k := s.Reserve(n); k > 0 {
			now := func() time.Time { return e.cfg.Clock.Now().Truncate(time.Microsecond) }
			return &Start{Flow: &flow.Start{Machine: s.Machine, Room: k, Fence: e.cfg.Fence, Clock: now},
				e: e, sched: s, rt: e.runtime}
		}
	}
	return nil
}

// Retry gives back the agent slots a failed try of the transaction
// reserved, before it runs again.
func (st *Start) Retry() { st.unreserve(st.Flow.Reserved()) }

// Abort gives back everything after the transaction failed; after Commit
// it does nothing.
func (st *Start) Abort() {
	if st.done {
		return
	}
	st.done = true
	st.unreserve(st.Flow.Reserved())
	st.Flow.Settle(false)
	st.sched.Adopt(0, st.Flow.Room)
}

// Commit hands the started tasks to their scheduler and their requests
// to the local agents after the transaction committed.
func (st *Start) Commit() {
	st.done = true
	f := st.Flow
	f.Settle(true)
	st.unreserve(f.Dropped)
	st.sched.Adopt(f.Started, f.Room)
	if f.Started > 0 {
		st.e.wakeSupervisor() // it holds tasks now: deadlines run
		st.e.cfg.Counters.Dispatched.Add(int64(f.Started))
		st.e.cfg.Counters.EagerStarts.Add(int64(f.Started))
		if st.rt != nil {
			st.rt.Dispatch(f.Requests)
		}
	}
}

func (st *Start) unreserve(reqs []*dt.AgentRequest) {
	if st.rt != nil && len(reqs) > 0 {
		st.rt.Unreserve(reqs)
	}
}
