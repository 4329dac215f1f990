package flow

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/fault"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/store"
)

// Errors the state machine returns.
var (
	// ErrTaskConflict: a task with this ID exists from another submission:
	// a different workflow, input (as a JSON value), ordering key or
	// callback URL.
	ErrTaskConflict = errors.New("task ID already used by a different submission")
	// ErrNotResubmittable: only Error, Cancelled and Compensated tasks can
	// be resubmitted.
	ErrNotResubmittable = errors.New("task is not in Error or Cancelled, nor Compensated")
	// ErrAlreadyFinal: the task is final and cannot be cancelled.
	ErrAlreadyFinal = errors.New("task is already final")
	// ErrNotLeader: this supervisor does not hold the current lease.
	ErrNotLeader = errors.New("not the supervisor leader")
	// ErrBadStep: the step index does not exist in the task.
	ErrBadStep = errors.New("no such step")
)

// Counters are totals since the process started, for metrics, the demo and
// the benchmark. They change only when the transaction that did the work
// commits (see Machine.Commit), so a reader never counts work a rollback undid.
type Counters struct {
	Dispatched           atomic.Int64
	RepliesApplied       atomic.Int64
	LateReplies          atomic.Int64 // replies discarded by the fence
	SupervisorRecoveries atomic.Int64 // steps the supervisor reset for another try
	SupervisorWaits      atomic.Int64 // extended waits the supervisor started (WaitPolicy)
	Alerts               atomic.Int64
	TasksFinished        atomic.Int64 // tasks this process brought to Processed, Compensated or Error
	EagerStarts          atomic.Int64 // of Dispatched, tasks started at submission (Start)

	// Recorder, when set, gets what each committed transaction did
	// (instrument.Observation), for the metrics' histograms and labels.
	Recorder *instrument.Recorder
}

// tally is what one transaction would add to the Counters.
type tally struct {
	dispatched, applied, late, recoveries, waits, alerts, finished int64
	obs                                                            []instrument.Observation
}

func (c *Counters) add(t tally) {
	if c == nil {
		return
	}
	c.Dispatched.Add(t.dispatched)
	c.RepliesApplied.Add(t.applied)
	c.LateReplies.Add(t.late)
	c.SupervisorRecoveries.Add(t.recoveries)
	c.SupervisorWaits.Add(t.waits)
	c.Alerts.Add(t.alerts)
	c.TasksFinished.Add(t.finished)
	if len(t.obs) > 0 {
		c.Recorder.Observe(t.obs)
	}
}

// InputHash identifies a submission for idempotent submit.
func InputHash(workflow string, input []byte) string {
	h := sha256.New()
	h.Write([]byte(workflow))
	h.Write([]byte{0})
	h.Write(input)
	return hex.EncodeToString(h.Sum(nil))
}

// IdempotencyKey is the stable key of one step: the same on every attempt,
// agent retry, supervisor recovery and resubmission. Task IDs and step names
// cannot contain "/", so keys of different steps never collide.
func IdempotencyKey(taskID string, index int, name string) string {
	return fmt.Sprintf("%s/%d/%s", taskID, index, name)
}

// batch collects the writes of one transaction so they reach the store as a
// few batched calls.
type batch struct {
	released  int  // tasks the instance let go of
	claimable bool // some task became claimable: wake the schedulers
	tasks     []*dt.Task
	steps     []*dt.StepRecord
	dirtyT    map[*dt.Task]bool
	dirtyS    map[*dt.StepRecord]bool
	requests  []*dt.AgentRequest
	deletes   []store.StepRef
	forward   []*dt.AgentReply // branch replies for the instances holding their tasks
	forwardTo []string         // those instances
	events    []*dt.Event
	began     map[*dt.StepRecord]began // set when tracing (tracedBatch)
	waits     []*loaded                // tasks whose signal step started (see takeSignals)
}

func newBatch() *batch {
	return &batch{dirtyT: map[*dt.Task]bool{}, dirtyS: map[*dt.StepRecord]bool{}}
}

func (b *batch) task(t *dt.Task) {
	if !b.dirtyT[t] {
		b.dirtyT[t] = true
		b.tasks = append(b.tasks, t)
	}
}

func (b *batch) step(s *dt.StepRecord) {
	if !b.dirtyS[s] {
		b.dirtyS[s] = true
		b.steps = append(b.steps, s)
	}
}

func (b *batch) event(e *dt.Event) { b.events = append(b.events, e) }

// drop removes task id's requests and events from a batch of started tasks
// (see Start), moving its requests to start.Dropped.
func (b *batch) drop(id string, start *Start) (dropped bool) {
	b.requests = slices.DeleteFunc(b.requests, func(r *dt.AgentRequest) bool {
		if r.TaskID == id {
			start.Dropped = append(start.Dropped, r)
			dropped = true
			return true
		}
		return false
	})
	b.events = slices.DeleteFunc(b.events, func(e *dt.Event) bool { return e.TaskID == id })
	return dropped
}

// unstart gives back the namespace count of a started task that existed
// already.
func (st *Start) unstart(id string) {
	ns := dt.NamespaceOf(id)
	if i := slices.Index(st.starting, ns); i >= 0 {
		st.starting = slices.Delete(st.starting, i, i+1)
		st.Machine.nsStartDone([]string{ns}, false)
	}
}

func (b *batch) flush(ctx context.Context, x store.Executor) error {
	if fault.Armed() {
		if err := b.fault(); err != nil {
			return err
		}
	}
	// A task with an ordering key that became final lets the next task of
	// its key be claimed: wake the schedulers. (A dirty task that is final
	// became final in this transaction: nothing writes a final task
	// otherwise, except Resubmit, which sets claimable itself.)
	for _, t := range b.tasks {
		if t.OrderingKey != "" && t.ProcessState.Final() {
			b.claimable = true
			break
		}
	}
	if len(b.deletes) > 0 {
		if err := x.RequestDeleteByStep(ctx, &store.RequestDeleteByStepParams{Refs: b.deletes}); err != nil {
			return err
		}
	}
	if len(b.steps) > 0 {
		if err := x.StepUpdateMany(ctx, &store.StepUpdateManyParams{Steps: b.steps}); err != nil {
			return err
		}
	}
	if len(b.tasks) > 0 {
		if err := x.TaskUpdateMany(ctx, &store.TaskUpdateManyParams{Tasks: b.tasks}); err != nil {
			return err
		}
	}
	if stored := storedRequests(b.requests); len(stored) > 0 {
		if err := x.RequestInsertMany(ctx, &store.RequestInsertManyParams{Requests: stored}); err != nil {
			return err
		}
	}
	if len(b.events) > 0 {
		if err := notifier.InsertEvents(ctx, x, b.events); err != nil {
			return err
		}
	}
	if err := forwardReplies(ctx, x, b.forward, b.forwardTo); err != nil {
		return err
	}
	if err := notifyRequests(ctx, x, b.requests); err != nil {
		return err
	}
	if b.claimable {
		return store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicTasks})
	}
	return nil
}

// fault checks the batch's texts at the fault-injection point (tests).
func (b *batch) fault() error {
	var texts []string
	for _, t := range b.tasks {
		texts = append(texts, t.LastError)
	}
	for _, s := range b.steps {
		texts = append(texts, s.LastError)
	}
	for _, e := range b.events {
		texts = append(texts, e.Message)
	}
	return fault.Text(texts...)
}

// notifyRequests wakes the agents in other processes for the requests no
// runtime in this process took.
func notifyRequests(ctx context.Context, x store.Executor, reqs []*dt.AgentRequest) error {
	seen := map[string]bool{}
	for _, r := range reqs {
		if r.ClaimedBy == "" && !seen[r.Agent] {
			seen[r.Agent] = true
			if err := store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicRequests(r.Agent)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// storedRequests are the requests that need a row: all but those handed
// over in memory.
func storedRequests(reqs []*dt.AgentRequest) []*dt.AgentRequest {
	n := 0
	for _, r := range reqs {
		if !r.InProcess {
			n++
		}
	}
	if n == len(reqs) {
		return reqs
	}
	out := make([]*dt.AgentRequest, 0, n)
	for _, r := range reqs {
		if !r.InProcess {
			out = append(out, r)
		}
	}
	return out
}

// loaded is a task with its steps, read inside the transaction.
type loaded struct {
	task  *dt.Task
	steps []*dt.StepRecord
}

func load(ctx context.Context, x store.Executor, tasks []*dt.Task) (map[string]*loaded, error) {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	steps, err := x.StepListByTasks(ctx, &store.StepListByTasksParams{TaskIDs: ids})
	if err != nil {
		return nil, err
	}
	return group(tasks, steps), nil
}

// broken says what is wrong with a loaded task whose steps do not match
// it ("" if nothing is): advance would finish a task whose steps were
// missing as if they had all run. It cannot happen through the state
// machine (tasks are stored and deleted with all their steps), only by
// hand-edited data or a store bug.
func (l *loaded) broken() string {
	if len(l.steps) != l.task.StepCount {
		return fmt.Sprintf("%sthe store returned %d of the task's %d steps", BrokenPrefix, len(l.steps), l.task.StepCount)
	}
	for i, s := range l.steps {
		if s.Index != i {
			return fmt.Sprintf("%sthe store returned step %d in place %d", BrokenPrefix, s.Index, i)
		}
	}
	if l.task.CurrentStep < 0 || l.task.CurrentStep >= len(l.steps) {
		return fmt.Sprintf("%scurrent step %d out of range (%d steps)", BrokenPrefix, l.task.CurrentStep, len(l.steps))
	}
	return ""
}

// BrokenPrefix starts the LastError of a task set to Error because its
// stored steps do not match it (see quarantine).
const BrokenPrefix = "broken task: "

// quarantine makes a broken task Error with an operator alert, so that one
// bad task neither runs wrongly nor stops the work of the others. Its
// requests go too, so no agent runs a step of it again (after a restart,
// say).
func quarantine(b *batch, l *loaded, why, actor string, now time.Time) *dt.Event {
	t := l.task
	t.ProcessState = dt.Error
	t.LastError = why
	t.LockedBy, t.CompleteBy, t.UpdatedAt = "", nil, now
	b.task(t)
	for i := range max(t.StepCount, len(l.steps)) {
		b.deletes = append(b.deletes, store.StepRef{TaskID: t.ID, Index: i})
	}
	e := ev(t, -1, dt.EventError, actor, now)
	e.Alert, e.Message = true, why
	b.event(e)
	return e
}

// group puts steps (ordered by task and index) with their tasks.
func group(tasks []*dt.Task, steps []*dt.StepRecord) map[string]*loaded {
	m := make(map[string]*loaded, len(tasks))
	for _, t := range tasks {
		m[t.ID] = &loaded{task: t}
	}
	for _, s := range steps {
		if l := m[s.TaskID]; l != nil {
			l.steps = append(l.steps, s)
		}
	}
	return m
}

func ev(t *dt.Task, step int, typ dt.EventType, actor string, now time.Time) *dt.Event {
	return &dt.Event{TaskID: t.ID, StepIndex: step, Type: typ, State: t.ProcessState, Actor: actor, CreatedAt: now}
}

// Submission is one task and its steps to insert.
type Submission struct {
	Task  *dt.Task
	Steps []*dt.StepRecord
}

// Submit inserts tasks and their steps. A task whose ID already exists with
// the same workflow, input (compared as JSON values), ordering key and
// callback URL is not inserted again: its stored record is returned in its
// place. With any of them different the whole call fails with
// ErrTaskConflict, saying which. The result holds the stored task of each
// submission.
func Submit(ctx context.Context, x store.Executor, subs []Submission) ([]*dt.Task, error) {
	return SubmitAndStart(ctx, x, subs, nil)
}

// Start lets SubmitAndStart start new tasks in their submission's
// transaction (eager start): the task is inserted already claimed by a
// scheduler of this process, with its first step dispatched, as that
// scheduler's next claim would have left it. This saves the claim's
// transaction and the wait for it, which at low load is most of a task's
// latency. Only tasks with no ordering key, available at once, with at
// least one step, are started; the others are left Pending for a claim.
type Start struct {
	// Machine is the scheduler whose instance holds the started tasks;
	// only its Instance and Reserve are used, so it may be another
	// goroutine's.
	Machine *Machine
	// Room caps the tasks started.
	Room int
	// Fence, when set, runs before anything is started (the instance
	// lease check of the scheduler's own transactions).
	Fence func(ctx context.Context, x store.Executor, now time.Time) error
	// Clock reads the time the steps start, after any wait for an
	// ordering key.
	Clock func() time.Time
	// Now is when the steps started; set by SubmitAndStart.
	Now time.Time

	// Set by SubmitAndStart, valid once the transaction committed:
	// Requests are the dispatched requests, to hand to the agent runtime
	// (those with InProcess) after the commit, and Started counts their
	// tasks. Dropped are requests reserved for tasks that turned out to
	// exist already, whose slots must be returned.
	Requests, Dropped []*dt.AgentRequest
	Started           int

	reserved []*dt.AgentRequest // every request dispatched
	starting []string           // namespaces of started tasks counted against Machine.NamespaceMaxInFlight
}

// Settle ends the namespace counts of the started tasks once the
// transaction committed (commit) or failed: committed, they count as held
// by the Machine; failed, they are given back.
func (st *Start) Settle(commit bool) {
	st.Machine.nsStartDone(st.starting, commit)
	st.starting = nil
}

// Reserved lists every request SubmitAndStart dispatched: after a rollback,
// the agent slots to return.
func (st *Start) Reserved() []*dt.AgentRequest { return st.reserved }

// startable reports whether a new task may be started at submission (its
// namespace's cap is checked apart, by Machine.nsStart).
func startable(t *dt.Task, steps []*dt.StepRecord, now time.Time) bool {
	return t.OrderingKey == "" && t.ProcessState == dt.Pending && len(steps) > 0 && steps[0].Signal == "" && !t.AvailableAt.After(now)
}

// SubmitAndStart is Submit that also starts new tasks (see Start); start
// may be nil. It resets start's results first, so a caller may run it again
// with the same Start after a rollback.
func SubmitAndStart(ctx context.Context, x store.Executor, subs []Submission, start *Start) ([]*dt.Task, error) {
	if start != nil {
		start.Settle(false) // a failed try's counts
		start.Requests, start.Dropped, start.Started, start.reserved = nil, nil, 0, nil
	}
	out := make([]*dt.Task, len(subs))
	first := map[string]int{} // ID → index of its first submission in this call
	var fresh []*dt.Task
	var freshIdx []int
	for i, s := range subs {
		if j, dup := first[s.Task.ID]; dup {
			if diff := conflict(subs[j].Task, s.Task); diff != "" {
				return nil, conflictError(s.Task.ID, strings.Replace(diff, "is stored", "is submitted first in this call", 1))
			}
			continue
		}
		first[s.Task.ID] = i
		fresh = append(fresh, s.Task)
		freshIdx = append(freshIdx, i)
	}
	// Reserving ordering positions may wait for another transaction
	// holding a key: start nothing before it, so that no step's budget
	// runs and no instance lease check waits meanwhile.
	if err := reserveOrdering(ctx, x, fresh); err != nil {
		return nil, err
	}
	var sb *batch // the started tasks' requests and step_started events
	if start != nil {
		if subs, sb = startTasks(subs, fresh, freshIdx, start); sb != nil {
			start.reserved = slices.Clone(sb.requests)
			if start.Fence != nil {
				if err := start.Fence(ctx, x, start.Now); err != nil {
					return nil, err
				}
			}
		}
	}
	inserted, err := x.TaskInsertMany(ctx, &store.TaskInsertManyParams{Tasks: fresh})
	if err != nil {
		return nil, err
	}
	var (
		steps   []*dt.StepRecord
		events  []*dt.Event
		pending bool     // a new task was left Pending, for a claim
		unused  []string // keys reserved for tasks that existed already
	)
	for k, t := range fresh {
		i := freshIdx[k]
		if !inserted[k] && t.OrderingKey != "" {
			unused = append(unused, t.OrderingKey)
		}
		if inserted[k] {
			out[i] = t
			pending = pending || t.ProcessState == dt.Pending
			steps = append(steps, subs[i].Steps...)
			e := ev(t, -1, dt.EventSubmitted, "", t.CreatedAt)
			e.State = dt.Pending // a started task was submitted Pending, then claimed
			events = append(events, e)
			continue
		}
		if sb != nil {
			// Not new after all: drop what starting it dispatched.
			if sb.drop(t.ID, start) {
				start.unstart(t.ID)
			}
		}
		cur, err := x.TaskGet(ctx, &store.TaskGetParams{ID: t.ID})
		if err != nil {
			return nil, err
		}
		if diff := conflict(cur, t); diff != "" {
			return nil, conflictError(t.ID, diff)
		}
		out[i] = cur
	}
	// A key reserved only for tasks that existed already has a position
	// no task uses; its row is pruned should no task have the key (the
	// stored task has the same key, or conflict refused the call, so one
	// normally does: the prune is a guard against a row kept for good).
	if err := x.OrderingKeyPrune(ctx, &store.OrderingKeyPruneParams{Keys: unused}); err != nil {
		return nil, err
	}
	for i, s := range subs {
		if out[i] == nil {
			out[i] = out[first[s.Task.ID]]
		}
	}
	if err := x.StepInsertMany(ctx, &store.StepInsertManyParams{Steps: steps}); err != nil {
		return nil, err
	}
	if sb != nil {
		// Each started task's events right after its submitted event: one
		// run of the task's events, which the store keeps in one row.
		events = afterTheirTasks(events, sb.events)
		if stored := storedRequests(sb.requests); len(stored) > 0 {
			if err := x.RequestInsertMany(ctx, &store.RequestInsertManyParams{Requests: stored}); err != nil {
				return nil, err
			}
		}
		start.Requests, start.Started = sb.requests, len(sb.requests)
	}
	if err := notifier.InsertEvents(ctx, x, events); err != nil {
		return nil, err
	}
	if sb != nil {
		// The schedulers are woken only for tasks left Pending.
		if err := notifyRequests(ctx, x, sb.requests); err != nil {
			return nil, err
		}
	}
	if pending && len(steps) > 0 {
		return out, store.Notify(ctx, x, &store.NotifyParams{Topic: store.TopicTasks})
	}
	return out, nil
}

// afterTheirTasks returns events with each of more placed right after the
// last event of its task in events (in order), or at the end if its task
// has none there.
func afterTheirTasks(events, more []*dt.Event) []*dt.Event {
	byTask := map[string][]*dt.Event{}
	for _, e := range more {
		byTask[e.TaskID] = append(byTask[e.TaskID], e)
	}
	last := map[string]int{}
	for i, e := range events {
		last[e.TaskID] = i
	}
	out := make([]*dt.Event, 0, len(events)+len(more))
	for i, e := range events {
		out = append(out, e)
		if last[e.TaskID] == i {
			out = append(out, byTask[e.TaskID]...)
			delete(byTask, e.TaskID)
		}
	}
	for _, e := range more {
		if _, left := byTask[e.TaskID]; left {
			out = append(out, e)
		}
	}
	return out
}

// startTasks starts up to start.Room of the new tasks fresh (the first
// submission of each ID, at freshIdx in subs; see Start). It replaces each
// started task, in fresh and in a copy of subs it returns, by a started
// copy with copies of its steps, so the caller's records are not changed
// and a submission retried after a rollback starts afresh. The batch holds
// the dispatches; it is nil if nothing was started.
func startTasks(subs []Submission, fresh []*dt.Task, freshIdx []int, start *Start) ([]Submission, *batch) {
	start.Now = start.Clock()
	var sb *batch
	for k, t := range fresh {
		if start.Room <= 0 || (sb != nil && len(sb.requests) >= start.Room) {
			break
		}
		i := freshIdx[k]
		if !startable(t, subs[i].Steps, start.Now) {
			continue
		}
		// Its namespace's cap applies as to a claim: at the cap, the task
		// waits Pending for one.
		ns := dt.NamespaceOf(t.ID)
		ok, counted := start.Machine.nsStart(ns)
		if !ok {
			continue
		}
		if counted {
			start.starting = append(start.starting, ns)
		}
		if sb == nil {
			sb, subs = newBatch(), slices.Clone(subs)
		}
		c := *t
		c.ProcessState = dt.Processing
		steps := make([]*dt.StepRecord, len(subs[i].Steps))
		for j, st := range subs[i].Steps {
			cs := *st
			steps[j] = &cs
		}
		n := len(sb.requests)
		dispatchNext(sb, start.Machine.Instance, start.Machine.Reserve, &loaded{task: &c, steps: steps}, start.Now)
		// The requests may go to agents in memory while the caller holds
		// the returned task: each gets its own input.
		for _, req := range sb.requests[n:] {
			req.Input = bytes.Clone(req.Input)
		}
		subs[i] = Submission{Task: &c, Steps: steps}
		fresh[k] = &c
	}
	return subs, sb
}

// reserveOrdering gives each task with an OrderingKey its position within
// the key, in submission order. The reservation locks the keys until the
// transaction ends (see store.Executor.OrderingKeyReserve), so positions
// follow commit order. A task whose ID turns out to exist already is not
// inserted and leaves a gap, which orders nothing.
func reserveOrdering(ctx context.Context, x store.Executor, tasks []*dt.Task) error {
	var (
		keys  []string
		keyed []*dt.Task
	)
	for _, t := range tasks {
		if t.OrderingKey == "" {
			t.OrderingSeq = 0 // no key, no position
			continue
		}
		keys = append(keys, t.OrderingKey)
		keyed = append(keyed, t)
	}
	if len(keys) == 0 {
		return nil
	}
	seqs, err := x.OrderingKeyReserve(ctx, &store.OrderingKeyReserveParams{Keys: keys})
	if err != nil {
		return err
	}
	if len(seqs) != len(keyed) {
		return fmt.Errorf("ordering positions: got %d for %d tasks", len(seqs), len(keyed))
	}
	for i, t := range keyed {
		t.OrderingSeq = seqs[i]
	}
	return nil
}

// Machine runs transitions for one role instance.
type Machine struct {
	Instance string
	Counters *Counters
	pending  tally // counts of the transaction in progress
	// Trace, when on, records the spans of the transactions that commit.
	Trace *tracing.Tracer
	spans []tracing.Record // of the transaction in progress

	// floor is where the next claim starts (store.TaskClaimParams.After):
	// the last task of the last claim, while claims come back full (a
	// backlog). A claim that is not full clears it, and it is dropped
	// after claimFloorTTL, so tasks that became claimable before it (an
	// ordered task whose predecessor finished, a clock behind another
	// process's) wait at most that long. pendingFloor is the floor the
	// transaction in progress would leave (set: pendingSet).
	floor, pendingFloor      *store.ClaimPosition
	floorSince, pendingSince time.Time
	pendingSet               bool

	// Reserve, when set, offers each dispatched request to an agent runtime
	// in this process: if it returns ok, the request is marked claimed by
	// claimedBy and InProcess, is not stored, and must be handed to that
	// runtime after commit (see Restore for a restart).
	Reserve func(agent string) (claimedBy string, ok bool)

	// NamespaceMaxInFlight, when positive, caps the tasks of one namespace
	// (drovertype.NamespaceOf) the instance holds, once it has claimed or
	// started a task of a namespace other than the default one: a claimed
	// task of a namespace at its cap is let go of at once, claimable again
	// after NamespaceDelay, and a Start leaves it Pending, so one
	// namespace's slow tasks cannot take all the room of the instance. The
	// counts are kept here and set again from the store by
	// SetNamespaceHeld.
	NamespaceMaxInFlight int
	ns                   nsCounts
}

// NamespaceDelay is how long a claimed task whose namespace is at
// Machine.NamespaceMaxInFlight waits before it is claimable again.
const NamespaceDelay = 500 * time.Millisecond

// nsCounts are the tasks held per namespace, the changes of the
// transaction in progress, and the tasks being started at submission
// (Start), whose transactions have not committed yet.
type nsCounts struct {
	mu       sync.Mutex
	on       bool // a task of a namespace other than the default one was claimed or started
	held     map[string]int
	pending  map[string]int
	starting map[string]int
}

// SetNamespaceHeld replaces the counts of held tasks per namespace (from
// the store: the supervisor and operators take tasks away without telling
// the instance).
func (m *Machine) SetNamespaceHeld(held map[string]int) {
	m.ns.mu.Lock()
	defer m.ns.mu.Unlock()
	m.ns.held = held
}

// NamespaceHeld returns a copy of the tasks held per namespace (stored
// namespace, "" for the default one), counted once namespaces are in use.
func (m *Machine) NamespaceHeld() map[string]int {
	m.ns.mu.Lock()
	defer m.ns.mu.Unlock()
	out := make(map[string]int, len(m.ns.held))
	for ns, n := range m.ns.held {
		if n > 0 {
			out[ns] = n
		}
	}
	return out
}

// NamespacesInUse reports whether the instance claimed a task of a
// namespace other than the default one: the per-namespace cap applies.
func (m *Machine) NamespacesInUse() bool {
	m.ns.mu.Lock()
	defer m.ns.mu.Unlock()
	return m.ns.on
}

// nsFull reports whether the namespace of a claimed task is at its cap;
// if not, the task counts as held by the transaction in progress.
func (m *Machine) nsFull(t *dt.Task) bool {
	if m.NamespaceMaxInFlight <= 0 {
		return false
	}
	ns := dt.NamespaceOf(t.ID)
	m.ns.mu.Lock()
	defer m.ns.mu.Unlock()
	if ns != "" {
		m.ns.on = true
	}
	if !m.ns.on {
		return false
	}
	if m.ns.held[ns]+m.ns.pending[ns]+m.ns.starting[ns] >= m.NamespaceMaxInFlight {
		return true
	}
	m.nsAddLocked(ns, 1)
	return false
}

// nsStart reports whether a task of namespace ns may be started at
// submission (Start) under the cap nsFull applies to claims; counted says
// it now counts as starting, until nsStartDone. Starts run in other
// goroutines than the instance's ticks, hence counts of their own.
func (m *Machine) nsStart(ns string) (ok, counted bool) {
	if m.NamespaceMaxInFlight <= 0 {
		return true, false
	}
	m.ns.mu.Lock()
	defer m.ns.mu.Unlock()
	if ns != "" {
		m.ns.on = true
	}
	if !m.ns.on {
		return true, false
	}
	if m.ns.held[ns]+m.ns.pending[ns]+m.ns.starting[ns] >= m.NamespaceMaxInFlight {
		return false, false
	}
	if m.ns.starting == nil {
		m.ns.starting = map[string]int{}
	}
	m.ns.starting[ns]++
	return true, true
}

// nsStartDone ends the counts nsStart made: held once committed, else
// given back.
func (m *Machine) nsStartDone(nss []string, commit bool) {
	if len(nss) == 0 {
		return
	}
	m.ns.mu.Lock()
	defer m.ns.mu.Unlock()
	for _, ns := range nss {
		if m.ns.starting[ns]--; m.ns.starting[ns] <= 0 {
			delete(m.ns.starting, ns)
		}
		if commit {
			if m.ns.held == nil {
				m.ns.held = map[string]int{}
			}
			m.ns.held[ns]++
		}
	}
}

// nsLetGo counts a held task let go of by the transaction in progress.
func (m *Machine) nsLetGo(t *dt.Task) {
	if m.NamespaceMaxInFlight <= 0 {
		return
	}
	m.ns.mu.Lock()
	defer m.ns.mu.Unlock()
	if m.ns.on {
		m.nsAddLocked(dt.NamespaceOf(t.ID), -1)
	}
}

func (m *Machine) nsAddLocked(ns string, d int) {
	if m.ns.pending == nil {
		m.ns.pending = map[string]int{}
	}
	m.ns.pending[ns] += d
}

// nsCommit applies (commit) or drops the counts of the transaction.
func (m *Machine) nsCommit(commit bool) {
	m.ns.mu.Lock()
	defer m.ns.mu.Unlock()
	if commit {
		if m.ns.held == nil {
			m.ns.held = map[string]int{}
		}
		for ns, d := range m.ns.pending {
			if m.ns.held[ns] = max(0, m.ns.held[ns]+d); m.ns.held[ns] == 0 {
				delete(m.ns.held, ns)
			}
		}
	}
	clear(m.ns.pending)
}

// putBack lets go of a claimed task whose namespace is at its cap: Pending
// (or Compensating) again, claimable after NamespaceDelay.
func (m *Machine) putBack(b *batch, t *dt.Task, now time.Time) {
	if t.ProcessState == dt.Processing {
		t.ProcessState = dt.Pending // as it was before the claim
	}
	t.AvailableAt = now.Add(NamespaceDelay)
	if t.LockedBy == m.Instance {
		b.released++
	}
	t.LockedBy = ""
	t.CompleteBy = nil
	t.UpdatedAt = now
	b.task(t)
}

// Commit publishes the counts of the transaction that just committed.
// Call it after every successful transaction that ran Machine methods.
func (m *Machine) Commit() {
	m.nsCommit(true)
	m.Counters.add(m.pending)
	m.pending = tally{}
	if m.spans != nil {
		m.Trace.Emit(m.spans)
		m.spans = m.spans[:0]
	}
	if m.pendingSet {
		m.floor, m.floorSince = m.pendingFloor, m.pendingSince
		m.pendingFloor, m.pendingSet = nil, false
	}
}

// Discard drops the counts of a transaction that rolled back.
func (m *Machine) Discard() {
	m.nsCommit(false)
	m.pending, m.pendingFloor, m.pendingSet = tally{}, nil, false
	m.spans = m.spans[:0]
}

// claimFloorTTL bounds how long a claim floor is used before a claim starts
// from the first claimable task again.
const claimFloorTTL = time.Second

// claimAfter is where this transaction's next claim starts (nil: at the
// first claimable task).
func (m *Machine) claimAfter(now time.Time) *store.ClaimPosition {
	if m.pendingSet {
		return m.pendingFloor
	}
	// A clock set back also ends the floor: tasks made available after
	// that sort before it.
	if m.floor != nil && !now.Before(m.floorSince) && now.Sub(m.floorSince) < claimFloorTTL {
		return m.floor
	}
	return nil
}

// claimed moves the floor after a claim that started at after and asked
// for limit tasks: past its last task if it came back full, else back to
// the start.
func (m *Machine) claimed(after *store.ClaimPosition, cl []*dt.Task, limit int, now time.Time) {
	// The floor's age counts from the claim that started from the first
	// claimable task, carried while claims start at the floor.
	since := now
	switch {
	case after != nil && m.pendingSet:
		since = m.pendingSince
	case after != nil:
		since = m.floorSince
	}
	m.pendingSet, m.pendingFloor, m.pendingSince = true, nil, since
	if len(cl) < limit || len(cl) == 0 {
		return
	}
	last := store.ClaimPosition{ClaimAt: dt.ClaimAt(cl[0].AvailableAt, cl[0].Priority), ID: cl[0].ID}
	for _, t := range cl[1:] {
		at := dt.ClaimAt(t.AvailableAt, t.Priority)
		if at.After(last.ClaimAt) || (at.Equal(last.ClaimAt) && t.ID > last.ID) {
			last = store.ClaimPosition{ClaimAt: at, ID: t.ID}
		}
	}
	m.pendingFloor = &last
}

// Claim locks up to limit claimable tasks for the instance and dispatches each
// one's next request.
// It returns the requests it dispatched (stored, or handed over in process),
// how many tasks it claimed, and how many of those it let go of at once
// (nothing was left to do).
func (m *Machine) Claim(ctx context.Context, x store.Executor, now time.Time, limit int) (reqs []*dt.AgentRequest, claimed, released int, err error) {
	r, err := m.Tick(ctx, x, now, nil, limit)
	return r.Requests, r.Claimed, r.Released, err
}

// advance moves a held task forward: dispatch its next step (or next
// compensation), or finish it.
func (m *Machine) advance(b *batch, l *loaded, now time.Time) {
	t := l.task
	switch t.ProcessState {
	case dt.Processing:
		// A signal step (never a branch of a group) waits instead of
		// being dispatched.
		for _, s := range l.steps {
			if s.ProcessState != dt.Processed {
				if s.Signal != "" {
					m.wait(b, l, s, now)
					return
				}
				break
			}
		}
		if n, more := dispatchNext(b, m.Instance, m.Reserve, l, now); more {
			m.pending.dispatched += int64(n)
			b.task(t) // a reply of one branch of a group moves CompleteBy
			return
		}
		t.ProcessState = dt.Processed
		if n := len(l.steps); n > 0 {
			t.Output = output(l.steps, n-1)
		}
		m.release(b, t, now)
		b.event(ev(t, -1, dt.EventProcessed, m.Instance, now))
		m.pending.finished++
	case dt.Compensating:
		if i := nextToCompensate(l.steps); i >= 0 {
			dispatchStep(b, m.Instance, m.Reserve, l, i, dt.KindCompensate, now)
			m.pending.dispatched++
			return
		}
		t.ProcessState = dt.Compensated
		m.release(b, t, now)
		b.event(ev(t, -1, dt.EventCompensated, m.Instance, now))
		m.pending.finished++
	default:
		// Claimed in a state that needs no work (cannot happen through
		// TaskClaim); let go of it.
		m.release(b, t, now)
	}
}

// needsCompensation reports whether a step still has to be undone: it
// completed, or the supervisor marked it (its outcome is unknown: it timed
// out, and the remote service may have applied it), and its compensation has
// not finished.
func needsCompensation(s *dt.StepRecord) bool {
	if s.Compensation == "" {
		return false
	}
	switch s.CompensationState {
	case dt.Pending, dt.Processing:
		return true
	case "":
		return s.ProcessState == dt.Processed
	}
	return false
}

func (m *Machine) release(b *batch, t *dt.Task, now time.Time) {
	if t.LockedBy == m.Instance {
		b.released++
		m.nsLetGo(t)
	}
	t.LockedBy = ""
	t.CompleteBy = nil
	t.UpdatedAt = now
	b.task(t)
}

// dispatchStep sends step i of task l, held by instance: the step's
// attempt (its fencing token) moves on and its deadline is set, and the
// request goes to b (handed to an agent runtime of this process if reserve
// takes it).
func dispatchStep(b *batch, instance string, reserve func(agent string) (string, bool), l *loaded, i int, kind dt.RequestKind, now time.Time) {
	t, s := l.task, l.steps[i]
	deadline := now.Add(s.Timeout)
	s.Attempt++
	s.LockedBy = instance
	s.CompleteBy = &deadline
	s.UpdatedAt = now
	typ := dt.EventStepStarted
	if kind == dt.KindCompensate {
		if s.CompensationState == "" {
			s.FailureCount = 0
		}
		s.CompensationState = dt.Processing
		typ = dt.EventCompensating
	} else {
		s.ProcessState = dt.Processing
		if s.StartedAt == nil {
			started := now
			s.StartedAt = &started
		}
	}
	b.step(s)
	t.LockedBy = instance
	t.CurrentStep = s.Index
	t.CompleteBy = &deadline
	t.UpdatedAt = now
	b.task(t)
	req := request(l, i, kind, instance, now)
	if reserve != nil {
		req.ClaimedBy, req.InProcess = reserve(req.Agent)
	}
	b.requests = append(b.requests, req)
	e := ev(t, s.Index, typ, instance, now)
	e.Attempt = s.Attempt
	b.event(e)
}

// Restore stores a request again for each step the instance has in flight
// with no request or reply of its current attempt stored (a late reply of
// an earlier attempt does not count): steps handed in memory to an agent
// runtime of a process that stopped or died before the reply was applied
// (dt.AgentRequest.InProcess). A step whose reply waits in the reply queue
// (a remote agent answered while the scheduler was down) is left to it.
// A scheduler runs it when it starts, so that those steps are redone at
// once, with the same attempt and idempotency key, rather than after their
// CompleteBy. Steps whose CompleteBy has passed are left to the supervisor.
// It looks at up to limit held tasks and returns the requests it stored.
func (m *Machine) Restore(ctx context.Context, x store.Executor, now time.Time, limit int) ([]*dt.AgentRequest, error) {
	held, err := x.TaskListLockedBy(ctx, &store.TaskListLockedByParams{Instance: m.Instance, Limit: limit})
	if err != nil || len(held) == 0 {
		return nil, err
	}
	ids := make([]string, len(held))
	for i, t := range held {
		ids[i] = t.ID
	}
	// Read again, locked: the supervisor may be recovering some of them.
	tasks, steps, err := x.TaskGetManyWithSteps(ctx, &store.TaskGetManyWithStepsParams{IDs: ids})
	if err != nil {
		return nil, err
	}
	ls := group(tasks, steps)
	var (
		attempts []store.StepAttempt
		reqs     []*dt.AgentRequest
	)
	for _, t := range tasks {
		l := ls[t.ID]
		if t.LockedBy != m.Instance || l.broken() != "" {
			continue // someone took it meanwhile; a broken task is the claim's and supervisor's
		}
		// Every branch of a group in flight, else the current step.
		lo, hi := t.CurrentStep, t.CurrentStep+1
		if t.ProcessState == dt.Processing {
			lo, hi = span(l.steps, t.CurrentStep)
		}
		for i := lo; i < hi; i++ {
			s := l.steps[i]
			kind := dt.KindDo
			switch {
			case t.ProcessState == dt.Processing && s.ProcessState == dt.Processing:
			case t.ProcessState == dt.Compensating && s.CompensationState == dt.Processing:
				kind = dt.KindCompensate
			default:
				continue
			}
			if s.CompleteBy == nil || !now.Before(*s.CompleteBy) {
				continue
			}
			attempts = append(attempts, store.StepAttempt{TaskID: t.ID, Index: s.Index, Attempt: s.Attempt, Kind: kind})
			r := request(l, i, kind, m.Instance, now)
			// The payload is joined in when the request is claimed.
			r.Input, r.StepOutput, r.TraceContext = nil, nil, ""
			if !r.PreviousOwn {
				r.PreviousOutput = nil
			}
			reqs = append(reqs, r)
		}
	}
	exists, err := x.StepMessagesExist(ctx, &store.StepMessagesExistParams{Attempts: attempts})
	if err != nil {
		return nil, err
	}
	missing := reqs[:0]
	for i, r := range reqs {
		if !exists[i] {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	b := newBatch()
	b.requests = missing
	return missing, b.flush(ctx, x)
}

// ApplyReplies applies agents' replies to tasks the instance holds, each only
// if its attempt is current and its deadline has not passed; others are
// discarded, recorded and counted. It returns the requests it dispatched next.
// Unlike Tick, it waits for tasks another transaction holds locked.
func (m *Machine) ApplyReplies(ctx context.Context, x store.Executor, now time.Time, replies []*dt.AgentReply) (reqs []*dt.AgentRequest, released int, err error) {
	if len(replies) == 0 {
		return nil, 0, nil
	}
	r, err := m.tick(ctx, x, now, replies, 0, true)
	return r.Requests, r.Released, err
}

// TickResult is what one Tick did.
type TickResult struct {
	Requests []*dt.AgentRequest // the requests dispatched
	Claimed  int                // tasks claimed
	Released int                // held tasks let go of
	// More: tick again, a claim may find more: a task of an ordering key
	// became claimable, which this tick's claim could not see, or the claim
	// started at the floor and was not full.
	More bool
	// Deferred are the replies whose tasks another transaction held locked
	// (store.GetAndClaim.Busy): neither applied nor discarded, they are
	// for a later tick.
	Deferred []*dt.AgentReply
}

// Tick applies replies and claims up to limit new tasks, dispatching each
// one's next request, as one batch: the reads of both go to the store in
// one call (TaskGetAndClaim), so a driver can send them in one round trip.
// The claim therefore does not see what the replies change: a task whose
// reply lets the next task of its ordering key start is reported by more,
// so the caller ticks again. It returns the requests dispatched, how many
// tasks it claimed, and how many held tasks it let go of. It does not wait
// for a task another transaction holds locked: that task's replies come
// back in Deferred.
func (m *Machine) Tick(ctx context.Context, x store.Executor, now time.Time, replies []*dt.AgentReply, limit int) (TickResult, error) {
	return m.tick(ctx, x, now, replies, limit, false)
}

// tick is Tick; with wait it reads through store.GetThenClaim, which waits
// for locked tasks instead of reporting them busy.
func (m *Machine) tick(ctx context.Context, x store.Executor, now time.Time, replies []*dt.AgentReply, limit int, wait bool) (TickResult, error) {
	read := store.TaskGetAndClaim
	if wait {
		read = store.GetThenClaim
	}
	ids := replyTaskIDs(replies)
	// WriteLater: advance writes every claimed task below (dispatch or
	// release), so the claim need not write them too.
	after := m.claimAfter(now)
	r, err := read(ctx, x, &store.TaskGetAndClaimParams{IDs: ids, Claim: store.TaskClaimParams{Instance: m.Instance, Now: now, Limit: limit, WriteLater: true, After: after}})
	if err != nil {
		return TickResult{}, err
	}
	got, cl, steps := r.Got, r.Claimed, r.Steps
	// A claim that started at the floor and was not full may have passed
	// over tasks before the floor: tick again, from the start.
	again := after != nil && len(cl) < limit
	if limit > 0 {
		m.claimed(after, cl, limit, now)
	}
	// A task can be in both sets: a late reply's task that the supervisor
	// made claimable again (this transaction's own lock does not make the
	// claim skip it). Its reply is discarded, since the task is not held,
	// and discarding writes neither task nor step; the claimed copy is
	// then dispatched. So the two sets are loaded apart.
	held, fresh := group(got, steps), group(cl, steps)
	busy := make(map[string]bool, len(r.Busy))
	for _, id := range r.Busy {
		busy[id] = true
	}
	var deferred []*dt.AgentReply
	b := tracedBatch(m.Trace)
	for _, rp := range replies {
		if busy[rp.TaskID] {
			deferred = append(deferred, rp)
			continue
		}
		m.applyReply(b, held[rp.TaskID], rp, now)
	}
	for _, t := range cl {
		if m.nsFull(t) {
			m.putBack(b, t, now)
			continue
		}
		if l := fresh[t.ID]; !m.quarantined(b, l, now) {
			m.advance(b, l, now)
		}
	}
	if err := m.takeSignals(ctx, x, b, now); err != nil {
		return TickResult{}, err
	}
	m.pending.observe(m.Counters, b, now)
	err = b.flush(ctx, x)
	if err == nil {
		m.spans = b.spans(m.spans)
	}
	if b.claimable {
		// A task of an ordering key became claimable, likely before the
		// floor: the next claim starts from the first claimable task.
		m.pendingSet, m.pendingFloor = true, nil
	}
	return TickResult{Requests: b.requests, Claimed: len(cl), Released: b.released, More: b.claimable || again, Deferred: deferred}, err
}

// UnstorablePrefix starts the error of a step whose reply the store
// refused: a value of it (its error text, say) could not be stored.
const UnstorablePrefix = "the reply could not be stored: "

// Unstorable returns r as a failure for the reason cause, an error of the
// store refusing a value of r (store.ErrBadData): applied, it fails r's
// step for good, so the task follows its failure policy, and its error
// names the cause instead of the value that could not be stored.
func Unstorable(r *dt.AgentReply, cause error) *dt.AgentReply {
	f := *r
	f.Failed, f.Output = true, nil
	f.Error = UnstorablePrefix + dt.Storable(cause.Error())
	return &f
}

// replyTaskIDs lists the tasks replies are for, each once.
func replyTaskIDs(replies []*dt.AgentReply) []string {
	seen := map[string]bool{}
	var ids []string
	for _, r := range replies {
		if !seen[r.TaskID] {
			seen[r.TaskID] = true
			ids = append(ids, r.TaskID)
		}
	}
	return ids
}

// quarantined quarantines l if it is broken (and reports so); the task is
// then let go of.
func (m *Machine) quarantined(b *batch, l *loaded, now time.Time) bool {
	why := l.broken()
	if why == "" {
		return false
	}
	if l.task.LockedBy == m.Instance {
		b.released++
		m.nsLetGo(l.task)
	}
	quarantine(b, l, why, m.Instance, now)
	m.pending.alerts++
	m.pending.finished++
	return true
}

func (m *Machine) applyReply(b *batch, l *loaded, r *dt.AgentReply, now time.Time) {
	if l != nil && l.task.LockedBy == m.Instance && !l.task.ProcessState.Final() && m.quarantined(b, l, now) {
		m.pending.late++ // the reply is not applied
		return
	}
	var s *dt.StepRecord
	if l != nil && r.StepIndex >= 0 && r.StepIndex < len(l.steps) {
		s = l.steps[r.StepIndex]
	}
	if forwarded(b, l, s, r, m.Instance, now) {
		return
	}
	// A branch of a group may answer while the task is let go of, waiting
	// for a sibling's retry (see Leader.recover): it applies to the branch.
	unheld := s != nil && s.Group != "" && l.task.LockedBy == "" && l.task.ProcessState == dt.Pending
	current := s != nil && (l.task.LockedBy == m.Instance || unheld) && s.Attempt == r.Attempt &&
		s.CompleteBy != nil && !now.After(*s.CompleteBy)
	if current {
		switch r.Kind {
		case dt.KindDo:
			current = s.ProcessState == dt.Processing && (l.task.ProcessState == dt.Processing || unheld)
		case dt.KindCompensate:
			current = s.CompensationState == dt.Processing && l.task.ProcessState == dt.Compensating
		default:
			current = false
		}
	}
	if !current {
		m.pending.late++
		if l != nil {
			e := ev(l.task, r.StepIndex, dt.EventReplyDiscarded, m.Instance, now)
			e.Attempt = r.Attempt
			e.Message = "reply is stale: attempt superseded, deadline passed or task no longer held"
			b.event(e)
		}
		return
	}
	m.pending.applied++
	t := l.task
	b.attemptEnds(s, r.Kind)
	if !r.InProcess {
		b.deletes = append(b.deletes, store.StepRef{TaskID: t.ID, Index: s.Index})
	}
	s.LockedBy = ""
	s.CompleteBy = nil
	s.UpdatedAt = now
	b.step(s)
	switch {
	case r.Kind == dt.KindDo && !r.Failed:
		s.ProcessState = dt.Processed
		s.Output = r.Output
		s.LastError = ""
		completed(l, s, now)
		e := ev(t, s.Index, dt.EventStepProcessed, m.Instance, now)
		e.Attempt = r.Attempt
		b.event(e)
		if !unheld {
			m.advance(b, l, now)
		} // else the claim that takes the task back joins the group
	case r.Kind == dt.KindDo:
		s.ProcessState = dt.Error
		s.LastError = r.Error
		finished := now
		s.FinishedAt = &finished
		m.alert(b, t, s.Index, dt.EventStepFailed, "permanent error: "+r.Error, now).Attempt = r.Attempt
		m.failTask(b, l, s, r.Error, now)
	case !r.Failed:
		s.CompensationState = dt.Compensated
		s.LastError = ""
		e := ev(t, s.Index, dt.EventStepCompensated, m.Instance, now)
		e.Attempt = r.Attempt
		b.event(e)
		m.advance(b, l, now)
	default:
		s.CompensationState = dt.Error
		s.LastError = r.Error
		m.alert(b, t, s.Index, dt.EventStepFailed, "compensation failed permanently: "+r.Error, now).Attempt = r.Attempt
		t.ProcessState = dt.Error
		t.LastError = fmt.Sprintf("compensation of step %d (%s) failed: %s", s.Index, s.Name, r.Error)
		m.release(b, t, now)
		m.alert(b, t, -1, dt.EventError, t.LastError, now)
		m.pending.finished++
	}
}

func (m *Machine) alert(b *batch, t *dt.Task, step int, typ dt.EventType, msg string, now time.Time) *dt.Event {
	e := ev(t, step, typ, m.Instance, now)
	e.Alert = true
	e.Message = msg
	b.event(e)
	m.pending.alerts++
	return e
}

// failTask applies the failure policy of step s, which failed for good,
// to the whole task, while the instance holds it (or a sibling branch's
// retry let go of it): the other branches of its group are abandoned.
func (m *Machine) failTask(b *batch, l *loaded, s *dt.StepRecord, reason string, now time.Time) {
	t := l.task
	t.LastError = reason
	policy, _ := t.PolicyOf(s)
	abandon(b, l, s, policy == dt.PolicyCompensate, m.Instance, now)
	if policy == dt.PolicyCompensate {
		t.ProcessState = dt.Compensating
		b.event(ev(t, -1, dt.EventCompensating, m.Instance, now))
		m.advance(b, l, now)
		return
	}
	t.ProcessState = dt.Error
	m.release(b, t, now)
	m.alert(b, t, -1, dt.EventError, reason, now)
	m.pending.finished++
}

// Leader is the fenced identity of the holder of a lease in a term: the
// supervisor (package supervisor) and the other leader-run chores
// (package maintenance) act through it, each action checked against the
// lease in its own transaction.
type Leader struct {
	Instance string
	Term     int64
	Lease    string
	Counters *Counters

	// Recovered are the step_timed_out events of the last Sweep, for the
	// caller to log once its transaction committed; RecoveredTrace their
	// tasks' trace contexts, when tracing.
	Recovered      []*dt.Event
	RecoveredTrace []string
	// Trace, when on, records the spans of the sweeps that commit.
	Trace *tracing.Tracer

	pending tally
	spans   []tracing.Record
}

// Commit publishes the counts of the sweep transaction that just committed.
func (sv *Leader) Commit() {
	sv.Counters.add(sv.pending)
	sv.pending = tally{}
	if sv.spans != nil {
		sv.Trace.Emit(sv.spans)
		sv.spans = sv.spans[:0]
	}
}

// Discard drops the counts of a sweep that rolled back.
func (sv *Leader) Discard() { sv.pending, sv.spans = tally{}, sv.spans[:0] }

// CheckLeader fails with ErrNotLeader unless the lease, read inside the
// caller's transaction, is still ours in our term and unexpired at now.
func (sv *Leader) CheckLeader(ctx context.Context, x store.Executor, now time.Time) error {
	l, err := x.LeaseGet(ctx, &store.LeaseGetParams{Name: sv.Lease})
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotLeader
	}
	if err != nil {
		return err
	}
	if l.Holder != sv.Instance || l.Term != sv.Term || !now.Before(l.ExpiresAt) {
		return ErrNotLeader
	}
	return nil
}

// Sweep finds held tasks whose CompleteBy passed and recovers them: below the
// threshold the step goes back to Pending (after the workflow's back-off);
// at it, the step waits an extended period and is tried again while its
// WaitPolicy allows, and then its failure policy applies. Every action is
// fenced by the lease.
func (sv *Leader) Sweep(ctx context.Context, x store.Executor, now time.Time, limit int) (int, error) {
	if err := sv.CheckLeader(ctx, x, now); err != nil {
		return 0, err
	}
	tasks, err := x.TaskListExpired(ctx, &store.TaskListExpiredParams{Now: now, Limit: limit})
	if err != nil || len(tasks) == 0 {
		return 0, err
	}
	ls, err := load(ctx, x, tasks)
	if err != nil {
		return 0, err
	}
	b := tracedBatch(sv.Trace)
	b.claimable = true
	for _, t := range tasks {
		sv.recover(b, ls[t.ID], now)
	}
	sv.Recovered, sv.RecoveredTrace = sv.Recovered[:0], sv.RecoveredTrace[:0]
	for _, e := range b.events {
		if e.Type == dt.EventStepTimedOut {
			sv.Recovered = append(sv.Recovered, e)
			if sv.Trace.On() {
				sv.RecoveredTrace = append(sv.RecoveredTrace, ls[e.TaskID].task.TraceContext)
			}
		}
	}
	sv.pending.observe(sv.Counters, b, now)
	err = b.flush(ctx, x)
	if err == nil {
		sv.spans = b.spans(sv.spans)
	}
	return len(tasks), err
}

// RequestGrace is how long after its CompleteBy a request nobody answered
// stays stored before ExpireRequests deletes it: its step has been
// recovered by then, and a late answer is refused either way.
const RequestGrace = time.Minute

// ExpireRequests deletes up to limit requests whose CompleteBy passed
// more than RequestGrace before now, if this leader still leads.
func (sv *Leader) ExpireRequests(ctx context.Context, x store.Executor, now time.Time, limit int) (int, error) {
	if err := sv.CheckLeader(ctx, x, now); err != nil {
		return 0, err
	}
	return x.RequestDeleteExpired(ctx, &store.RequestDeleteExpiredParams{Now: now.Add(-RequestGrace), Limit: limit})
}

// Retain deletes up to limit final tasks last updated more than age before
// now, with their history, if this supervisor still leads.
func (sv *Leader) Retain(ctx context.Context, x store.Executor, now time.Time, age time.Duration, limit int) (int, error) {
	if err := sv.CheckLeader(ctx, x, now); err != nil {
		return 0, err
	}
	return x.TaskDeleteFinished(ctx, &store.TaskDeleteFinishedParams{Before: now.Add(-age), Limit: limit})
}

// ForgetDedupe deletes up to limit session-queue de-duplication entries
// whose window has passed, if this supervisor still leads.
func (sv *Leader) ForgetDedupe(ctx context.Context, x store.Executor, now time.Time, limit int) (int, error) {
	if err := sv.CheckLeader(ctx, x, now); err != nil {
		return 0, err
	}
	return x.DedupeDeleteExpired(ctx, &store.DedupeDeleteExpiredParams{Now: now, Limit: limit})
}

func (sv *Leader) event(b *batch, t *dt.Task, step int, typ dt.EventType, now time.Time) *dt.Event {
	e := ev(t, step, typ, sv.Instance, now)
	e.Term = sv.Term
	b.event(e)
	return e
}

func (sv *Leader) recover(b *batch, l *loaded, now time.Time) {
	t := l.task
	t.LockedBy = ""
	t.CompleteBy = nil
	t.UpdatedAt = now
	b.task(t)
	if why := l.broken(); why != "" {
		// Never leave a task that nothing will pick up.
		quarantine(b, l, why, sv.Instance, now).Term = sv.Term
		sv.pending.alerts++
		sv.pending.finished++
		return
	}
	s := l.steps[t.CurrentStep]
	if t.ProcessState == dt.Processing && s.Waiting() {
		sv.signalTimeout(b, l, s, now)
		return
	}
	compensating := t.ProcessState == dt.Compensating
	// The steps whose CompleteBy passed: the current one, or the branches
	// of the current group. The other branches keep running; their replies
	// apply while the task waits to be claimed again.
	var expired []*dt.StepRecord
	if s := l.steps[t.CurrentStep]; compensating || s.Group == "" {
		if (!compensating && s.ProcessState == dt.Processing) || (compensating && s.CompensationState == dt.Processing) {
			expired = append(expired, s)
		}
	} else {
		lo, hi := span(l.steps, t.CurrentStep)
		for _, s := range l.steps[lo:hi] {
			if s.ProcessState == dt.Processing && (s.CompleteBy == nil || !now.Before(*s.CompleteBy)) {
				expired = append(expired, s)
			}
		}
	}
	if len(expired) == 0 {
		// Nothing in flight: make it claimable again; the claim's advance
		// works out what comes next.
		if !compensating {
			t.ProcessState = dt.Pending
		}
		return
	}
	t.AvailableAt = now
	for _, s := range expired {
		if !sv.timedOut(b, l, s, compensating, now) {
			return // failed for good: the policy applied to the whole task
		}
	}
}

// timedOut recovers step s of l, whose CompleteBy passed: another try
// (after the back-off or an extended wait), or, when it failed for good,
// the failure policy for the whole task (retry false).
func (sv *Leader) timedOut(b *batch, l *loaded, s *dt.StepRecord, compensating bool, now time.Time) (retry bool) {
	t := l.task
	b.deletes = append(b.deletes, store.StepRef{TaskID: t.ID, Index: s.Index})
	if compensating {
		b.attemptEnds(s, dt.KindCompensate)
	} else {
		b.attemptEnds(s, dt.KindDo)
	}
	s.FailureCount++
	t.FailureCount++
	s.LockedBy = ""
	s.CompleteBy = nil
	s.UpdatedAt = now
	b.step(s)
	e := sv.event(b, t, s.Index, dt.EventStepTimedOut, now)
	e.Attempt = s.Attempt
	e.Message = fmt.Sprintf("CompleteBy passed; FailureCount %d of %d", s.FailureCount, t.FailureThreshold)

	again := func(at time.Time) {
		if compensating {
			s.CompensationState = dt.Pending
		} else {
			s.ProcessState = dt.Pending
			t.ProcessState = dt.Pending
		}
		if at.After(t.AvailableAt) {
			t.AvailableAt = at
		}
	}
	if s.FailureCount < t.FailureThreshold {
		again(now.Add(backoff(t.RetryDelay, s.FailureCount)))
		sv.pending.recoveries++
		sv.event(b, t, s.Index, dt.EventStepRetry, now).Attempt = s.Attempt
		return true
	}
	alert := func(typ dt.EventType, step int, msg string) *dt.Event {
		e := sv.event(b, t, step, typ, now)
		e.Alert = true
		e.Message = msg
		sv.pending.alerts++
		return e
	}
	policy, wait := t.PolicyOf(s)
	// Each wait is followed by one attempt, whose timeout counts: the
	// waits so far are the failures past the threshold.
	waits := s.FailureCount - t.FailureThreshold
	if waits < wait.MaxWaits {
		next := now.Add(wait.Wait(waits + 1))
		again(next)
		s.LastError = fmt.Sprintf("step %d (%s) timed out %d times; extended wait %d of %d, next attempt at %s",
			s.Index, s.Name, s.FailureCount, waits+1, wait.MaxWaits, next.UTC().Format(time.RFC3339Nano))
		sv.pending.waits++
		alert(dt.EventStepWaiting, s.Index, s.LastError).Attempt = s.Attempt
		return true
	}
	reason := fmt.Sprintf("step %d (%s) timed out %d times", s.Index, s.Name, s.FailureCount)
	if waits > 0 {
		reason += fmt.Sprintf(" (after %d extended waits)", waits)
	}
	s.LastError = reason
	if compensating {
		s.CompensationState = dt.Error
		t.ProcessState = dt.Error
		t.LastError = "compensation: " + reason
		alert(dt.EventError, -1, t.LastError)
		sv.pending.finished++
		return false
	}
	s.ProcessState = dt.Error
	t.LastError = reason
	for _, e := range abandon(b, l, s, policy == dt.PolicyCompensate, sv.Instance, now) {
		e.Term = sv.Term
	}
	if policy == dt.PolicyCompensate {
		if s.Compensation != "" {
			// It timed out: it may have taken effect. Undo it too; the
			// compensation is idempotent like every agent call. Like
			// every compensation it counts its own failures (the
			// forward run's are in LastError and the history).
			s.CompensationState = dt.Pending
			s.FailureCount = 0
		}
		t.ProcessState = dt.Compensating
		alert(dt.EventStepFailed, s.Index, reason+"; compensating")
		sv.event(b, t, -1, dt.EventCompensating, now)
		return false
	}
	t.ProcessState = dt.Error
	alert(dt.EventError, -1, reason)
	sv.pending.finished++
	return false
}

// maxBackoff caps a recovered step's wait before it is claimed again.
const maxBackoff = 24 * time.Hour

// backoff doubles the workflow's retry delay for each failure, capped at 64×
// and at maxBackoff.
func backoff(base time.Duration, failures int) time.Duration {
	if base <= 0 {
		return 0
	}
	if base >= maxBackoff {
		return maxBackoff
	}
	return min(base<<min(max(failures-1, 0), 6), maxBackoff)
}

// Cancel moves a non-final task to Cancelled. An agent call in flight is not
// interrupted, but its reply will be discarded by the fence.
func Cancel(ctx context.Context, x store.Executor, id, actor, reason string, now time.Time) (*dt.Task, error) {
	t, err := x.TaskGet(ctx, &store.TaskGetParams{ID: id})
	if err != nil {
		return nil, err
	}
	if t.ProcessState.Final() {
		return t, fmt.Errorf("task %q is %s: %w", id, t.ProcessState, ErrAlreadyFinal)
	}
	ls, err := load(ctx, x, []*dt.Task{t})
	if err != nil {
		return nil, err
	}
	b := newBatch()
	for _, s := range ls[id].steps {
		if s.ProcessState == dt.Pending || s.ProcessState == dt.Processing {
			s.ProcessState = dt.Cancelled
			s.LockedBy, s.CompleteBy, s.UpdatedAt = "", nil, now
			b.step(s)
			b.deletes = append(b.deletes, store.StepRef{TaskID: id, Index: s.Index})
		}
		if s.CompensationState == dt.Processing || s.CompensationState == dt.Pending {
			s.CompensationState = dt.Cancelled
			s.LockedBy, s.CompleteBy, s.UpdatedAt = "", nil, now
			b.step(s)
			b.deletes = append(b.deletes, store.StepRef{TaskID: id, Index: s.Index})
		}
	}
	t.ProcessState = dt.Cancelled
	t.LockedBy, t.CompleteBy, t.UpdatedAt = "", nil, now
	b.task(t)
	e := ev(t, -1, dt.EventCancelled, actor, now)
	e.Message = reason
	b.event(e)
	return t, b.flush(ctx, x)
}

// Resubmit puts an Error or Cancelled task back to work, keeping every
// step's idempotency key. A task whose compensation failed resumes
// compensating. Otherwise it resumes forward from fromStep, or, when
// fromStep < 0, from its first step not yet Processed. A Compensated task
// starts a new run (resubmitCompensated).
func Resubmit(ctx context.Context, x store.Executor, id, actor string, fromStep int, now time.Time) (*dt.Task, error) {
	t, err := x.TaskGet(ctx, &store.TaskGetParams{ID: id})
	if err != nil {
		return nil, err
	}
	if t.ProcessState != dt.Error && t.ProcessState != dt.Cancelled && t.ProcessState != dt.Compensated {
		return t, fmt.Errorf("task %q is %s: %w", id, t.ProcessState, ErrNotResubmittable)
	}
	if t.ProcessState == dt.Compensated && fromStep > 0 {
		return t, fmt.Errorf("task %q was compensated, so it can only run again from the start (step 0), not from step %d: %w", id, fromStep, ErrNotResubmittable)
	}
	if fromStep >= t.StepCount {
		return t, fmt.Errorf("task %q has %d steps, step %d: %w", id, t.StepCount, fromStep, ErrBadStep)
	}
	ls, err := load(ctx, x, []*dt.Task{t})
	if err != nil {
		return nil, err
	}
	if why := ls[id].broken(); why != "" {
		return t, fmt.Errorf("task %q: %s: %w", id, why, ErrNotResubmittable)
	}
	steps := ls[id].steps
	b := newBatch()
	if t.ProcessState == dt.Compensated {
		return resubmitCompensated(ctx, x, b, t, steps, actor, now)
	}
	compensating := false
	for _, s := range steps {
		if s.CompensationState != "" {
			compensating = true
		}
	}
	if compensating && fromStep >= 0 {
		// Steps were undone; running some forward again would leave the
		// task Processed with undone steps (and their keys would make the
		// remote service treat the redo as already done).
		return t, fmt.Errorf("task %q was being compensated; it can only resume compensating (resubmit without a step): %w", id, ErrNotResubmittable)
	}
	if compensating {
		for _, s := range steps {
			if s.CompensationState == dt.Error || s.CompensationState == dt.Cancelled || s.CompensationState == dt.Processing {
				s.CompensationState = dt.Pending
				s.FailureCount, s.LastError, s.UpdatedAt = 0, "", now
				b.step(s)
			}
		}
		t.ProcessState = dt.Compensating
	} else {
		start := fromStep
		if start >= 0 && start < len(steps) {
			start, _ = span(steps, start) // a group runs again as a whole
		}
		if start < 0 {
			start = len(steps)
			for i, s := range steps {
				if s.ProcessState != dt.Processed {
					start = i
					break
				}
			}
		}
		for _, s := range steps[min(start, len(steps)):] {
			s.ProcessState = dt.Pending
			s.CompensationState = ""
			s.FailureCount, s.LastError, s.UpdatedAt = 0, "", now
			s.LockedBy, s.CompleteBy, s.FinishedAt, s.FinishSeq = "", nil, nil, 0
			b.step(s)
		}
		t.ProcessState = dt.Pending
	}
	t.FailureCount, t.LastError = 0, ""
	t.LockedBy, t.CompleteBy = "", nil
	t.AvailableAt, t.UpdatedAt = now, now
	b.task(t)
	b.event(ev(t, fromStep, dt.EventResubmitted, actor, now))
	b.claimable = true
	return t, b.flush(ctx, x)
}

// resubmitCompensated starts a Compensated task again from its first step,
// as a new run. Its steps were done and then undone, so the remote services
// have seen their idempotency keys already: reusing them would make a
// service answer the redo from its idempotency store without doing it
// again. Every step therefore gets the key of the next run (NextRunKey);
// within the run, keys stay stable over attempts as always.
func resubmitCompensated(ctx context.Context, x store.Executor, b *batch, t *dt.Task, steps []*dt.StepRecord, actor string, now time.Time) (*dt.Task, error) {
	run := 0
	for _, s := range steps {
		s.IdempotencyKey, run = NextRunKey(s.IdempotencyKey)
		s.ProcessState, s.CompensationState = dt.Pending, ""
		s.FailureCount, s.LastError, s.Output, s.UpdatedAt = 0, "", nil, now
		s.LockedBy, s.CompleteBy, s.StartedAt, s.FinishedAt, s.FinishSeq = "", nil, nil, nil, 0
		b.step(s)
	}
	t.ProcessState, t.CurrentStep, t.Output = dt.Pending, 0, nil
	t.FailureCount, t.LastError = 0, ""
	t.LockedBy, t.CompleteBy = "", nil
	t.AvailableAt, t.UpdatedAt = now, now
	b.task(t)
	e := ev(t, 0, dt.EventResubmitted, actor, now)
	e.Message = fmt.Sprintf("run %d: the task was compensated, so its steps run again with new idempotency keys", run)
	b.event(e)
	b.claimable = true
	return t, b.flush(ctx, x)
}

// NextRunKey returns the idempotency key of a step's next run and that
// run's number: "T/0/charge" (run 1) becomes "T/0/charge/run-2", and
// "T/0/charge/run-2" becomes "T/0/charge/run-3". Task IDs and step names
// contain no "/", so the suffix cannot be confused with them.
func NextRunKey(key string) (string, int) {
	parts := strings.Split(key, "/")
	if len(parts) == 4 {
		if n, err := strconv.Atoi(strings.TrimPrefix(parts[3], "run-")); err == nil && n >= 2 {
			parts[3] = "run-" + strconv.Itoa(n+1)
			return strings.Join(parts, "/"), n + 1
		}
	}
	return key + "/run-2", 2
}
