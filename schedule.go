package drover

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/internal/maintenance"
	"github.com/drover-run/drover/internal/notifier"
	"github.com/drover-run/drover/store"
)

// CatchUpPolicy says which of a schedule's due times that passed while no
// leader fired them (every process down, or all paused by a crash) are
// fired when one is back. A leader that runs fires each due time within
// about a second, whatever the policy.
type CatchUpPolicy string

// The catch-up policies.
const (
	// CatchUpSkip fires none of the missed due times: only the latest one
	// that passed, and only if it is at most MissedAfter late.
	CatchUpSkip CatchUpPolicy = "skip"
	// CatchUpLast fires the latest due time that passed, however late;
	// older ones are skipped. The default.
	CatchUpLast CatchUpPolicy = "last"
	// CatchUpAll fires every due time that passed, oldest first.
	CatchUpAll CatchUpPolicy = "all"
)

// MissedAfter is how late a due time may be and still fire under
// CatchUpSkip.
const MissedAfter = time.Minute

// MinScheduleEvery is the shortest Schedule.Every.
const MinScheduleEvery = time.Second

// MaxScheduleNameBytes caps a schedule's name, so that the IDs of its
// tasks stay within MaxNameBytes.
const MaxScheduleNameBytes = 100

// ErrInvalidSchedule: a schedule's definition is not acceptable; the
// error says which schedule and what is wrong.
var ErrInvalidSchedule = errors.New("invalid schedule")

// ErrScheduleNotFound: no schedule of that name is stored.
var ErrScheduleNotFound = errors.New("schedule not found")

// ErrScheduleDefined: DeleteSchedule was asked to delete a schedule the
// Client itself defines (Config.Schedules or AddSchedules): it would store
// it again (see DeleteSchedule).
var ErrScheduleDefined = errors.New("schedule still defined")

// scheduleLease is the lease of the leader that fires due schedules.
const scheduleLease = "maintenance:schedules"

// Schedule submits Workflow with Input at every due time: those of a cron
// expression in a time zone, or one every fixed interval. Each due time
// submits exactly one task, whose ID is ScheduleTaskID(Name, due time),
// however many processes run and whatever crashes: the leader of the
// processes with the Supervisor role submits it and advances the
// schedule in one transaction.
type Schedule struct {
	// Name identifies the schedule: 1 to MaxScheduleNameBytes bytes,
	// printable, without spaces or "/".
	Name string
	// Workflow is the workflow submitted; the Client must know it.
	Workflow string
	// Input is the JSON input of every task. Default: null.
	Input []byte
	// Cron is a cron expression: five fields (minute, hour, day of month,
	// month, day of week), six with a leading seconds field, or a
	// descriptor (@hourly, @daily, @weekly, @monthly, @yearly). Give
	// either Cron or Every.
	Cron string
	// TimeZone is the IANA time zone Cron is read in ("Europe/Berlin").
	// Default UTC. Only with Cron.
	TimeZone string
	// Every is the fixed interval between due times, at least
	// MinScheduleEvery; the first is Every after the schedule is first
	// stored. Give either Cron or Every.
	Every time.Duration
	// CatchUp says which due times missed during downtime fire. Default
	// CatchUpLast.
	CatchUp CatchUpPolicy
}

// ScheduleState is a stored schedule: its definition, whether it is
// paused, its next due times and what it last submitted.
type ScheduleState struct {
	Schedule
	Paused bool
	// NextDue are the next due times not fired yet, at most
	// ScheduleStateNext of them; none while paused.
	NextDue []time.Time
	// LastDue is the last due time fired (nil: none yet).
	LastDue *time.Time
	// LastTask is the ID of the last task the schedule submitted, at a
	// due time or by RunScheduleNow ("": none yet).
	LastTask  string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ScheduleStateNext is how many next due times a ScheduleState lists.
const ScheduleStateNext = 5

// ScheduleTaskID is the ID of the task schedule name submits for due
// time due.
func ScheduleTaskID(name string, due time.Time) string {
	return "schedule:" + name + ":" + due.UTC().Format(time.RFC3339)
}

// cronParser reads five fields, an optional leading seconds field, and
// the descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// scheduleSpec computes a schedule's due times.
type scheduleSpec struct {
	cron  cron.Schedule
	loc   *time.Location
	every time.Duration
}

// next is the first due time after t (for Every, on the grid through
// anchor).
func (sp scheduleSpec) next(anchor, t time.Time) time.Time {
	if sp.cron != nil {
		return sp.cron.Next(t.In(sp.loc)).UTC()
	}
	if t.Before(anchor) {
		return anchor
	}
	return anchor.Add((t.Sub(anchor)/sp.every + 1) * sp.every)
}

// latest is the last due time at or before now, starting from the due
// time first (at or before now).
func (sp scheduleSpec) latest(first, now time.Time) time.Time {
	if sp.cron == nil {
		return first.Add(now.Sub(first) / sp.every * sp.every)
	}
	last := first
	for {
		n := sp.next(first, last)
		if n.After(now) || n.IsZero() {
			return last
		}
		last = n
	}
}

// parse checks the timing of s and returns its spec, or what is wrong
// with it, phrased for the user.
func (s Schedule) parse() (scheduleSpec, string) {
	switch {
	case s.Cron == "" && s.Every == 0:
		return scheduleSpec{}, "give Cron or Every"
	case s.Cron != "" && s.Every != 0:
		return scheduleSpec{}, "give Cron or Every, not both"
	case s.Every != 0:
		if s.TimeZone != "" {
			return scheduleSpec{}, "TimeZone is only for Cron"
		}
		if s.Every < MinScheduleEvery {
			return scheduleSpec{}, fmt.Sprintf("Every %s is shorter than %s", s.Every, MinScheduleEvery)
		}
		if s.Every%time.Second != 0 {
			return scheduleSpec{}, fmt.Sprintf("Every %s is not whole seconds", s.Every)
		}
		return scheduleSpec{every: s.Every}, ""
	}
	expr := strings.TrimSpace(s.Cron)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return scheduleSpec{}, fmt.Sprintf("Cron %q: give the time zone in TimeZone", s.Cron)
	}
	if strings.HasPrefix(expr, "@every") {
		return scheduleSpec{}, fmt.Sprintf("Cron %q: use Every for a fixed interval", s.Cron)
	}
	c, err := cronParser.Parse(expr)
	if err != nil {
		return scheduleSpec{}, fmt.Sprintf("Cron %q: %v", s.Cron, err)
	}
	loc := time.UTC
	if s.TimeZone != "" {
		if loc, err = time.LoadLocation(s.TimeZone); err != nil {
			return scheduleSpec{}, fmt.Sprintf("TimeZone %q is not a known IANA time zone", s.TimeZone)
		}
	}
	return scheduleSpec{cron: c, loc: loc}, ""
}

// Validate reports what is wrong with the definition, without checking
// that its workflow is known.
func (s Schedule) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidSchedule, s.Name, fmt.Sprintf(format, args...))
	}
	if p := dt.NameProblem(s.Name); p != "" {
		return bad("the name %s", p)
	}
	if len(s.Name) > MaxScheduleNameBytes {
		return bad("the name is %d bytes, the limit is %d", len(s.Name), MaxScheduleNameBytes)
	}
	if strings.HasPrefix(s.Name, "-") {
		return bad(`the name starts with "-"`)
	}
	if s.Workflow == "" {
		return bad("no Workflow")
	}
	if len(s.Input) > 0 && !json.Valid(s.Input) {
		return bad("Input is not a JSON document")
	}
	switch s.CatchUp {
	case "", CatchUpSkip, CatchUpLast, CatchUpAll:
	default:
		return bad("CatchUp %q is not skip, last or all", s.CatchUp)
	}
	if _, p := s.parse(); p != "" {
		return bad("%s", p)
	}
	return nil
}

func (s Schedule) withDefaults() Schedule {
	if len(s.Input) == 0 {
		s.Input = []byte("null")
	}
	if s.CatchUp == "" {
		s.CatchUp = CatchUpLast
	}
	return s
}

// sameTiming reports whether a stored schedule has s's due times.
func (s Schedule) sameTiming(r *dt.Schedule) bool {
	return s.Cron == r.Cron && s.TimeZone == r.TimeZone && s.Every == r.Every
}

// stored is s as a new row, first due after now.
func (s Schedule) stored(sp scheduleSpec, now time.Time) *dt.Schedule {
	anchor := now.Truncate(time.Second).Add(s.Every)
	return &dt.Schedule{Name: s.Name, Workflow: s.Workflow, Input: s.Input, Cron: s.Cron, TimeZone: s.TimeZone, Every: s.Every,
		CatchUp: string(s.CatchUp), NextDue: sp.next(anchor, now), CreatedAt: now, UpdatedAt: now}
}

// scheduleOf is a stored row's definition.
func scheduleOf(r *dt.Schedule) Schedule {
	return Schedule{Name: r.Name, Workflow: r.Workflow, Input: r.Input, Cron: r.Cron, TimeZone: r.TimeZone, Every: r.Every,
		CatchUp: CatchUpPolicy(r.CatchUp)}
}

// stateOf is a stored row as the API shows it.
func stateOf(r *dt.Schedule) ScheduleState {
	st := ScheduleState{Schedule: scheduleOf(r), Paused: r.Paused, LastDue: r.LastDue, LastTask: r.LastTask,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if sp, p := st.parse(); p == "" && !r.Paused {
		for d := r.NextDue; !d.IsZero() && len(st.NextDue) < ScheduleStateNext; d = sp.next(r.NextDue, d) {
			st.NextDue = append(st.NextDue, d)
		}
	}
	return st
}

// checkSchedules validates schedules against the known workflows.
func (c *Client) checkSchedules(ss []Schedule) error {
	var errs []error
	seen := map[string]bool{}
	c.wfMu.RLock()
	defer c.wfMu.RUnlock()
	for _, s := range ss {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%w %q: defined twice", ErrInvalidSchedule, s.Name))
		}
		seen[s.Name] = true
		if _, ok := c.workflows[s.Workflow]; !ok {
			errs = append(errs, fmt.Errorf("%w %q: %w %q", ErrInvalidSchedule, s.Name, ErrUnknownWorkflow, s.Workflow))
		}
	}
	return errors.Join(errs...)
}

// AddSchedules adds schedules to those this Client fires (when it runs
// the Supervisor role and leads), replacing those of the same names, and
// stores them: a new schedule is first due after now; a stored one keeps
// its state (paused, next due time) unless its cron expression, time zone
// or interval changed, which makes it next due after now. Their workflows
// must be known to the Client. Config.Schedules are added by Start.
func (c *Client) AddSchedules(ctx context.Context, ss []Schedule) error {
	if err := c.checkSchedules(ss); err != nil {
		return err
	}
	defs := make([]Schedule, len(ss))
	for i, s := range ss {
		defs[i] = s.withDefaults()
	}
	c.schedSync.Lock()
	defer c.schedSync.Unlock()
	if err := c.syncSchedules(ctx, defs); err != nil {
		return err
	}
	c.schedMu.Lock()
	for _, s := range defs {
		c.schedules[s.Name] = s
	}
	c.schedMu.Unlock()
	c.wakeScheduleLeader()
	return nil
}

// RemoveSchedules stops this Client firing the schedules named (those of
// Config.Schedules or AddSchedules): they stay stored, and fire in any
// other process that defines them, until DeleteSchedule deletes them. A
// name this Client does not define is ignored.
func (c *Client) RemoveSchedules(names ...string) {
	c.schedSync.Lock()
	defer c.schedSync.Unlock()
	c.schedMu.Lock()
	for _, n := range names {
		delete(c.schedules, n)
	}
	c.schedMu.Unlock()
	c.wakeScheduleLeader()
}

// DefinesSchedule reports whether this Client fires schedule name: it is
// among Config.Schedules or AddSchedules' and not removed since.
func (c *Client) DefinesSchedule(name string) bool {
	c.schedMu.Lock()
	defer c.schedMu.Unlock()
	_, ok := c.schedules[name]
	return ok
}

// scheduleRestoreEvery is how often the schedule leader looks for
// schedules it defines that were deleted from the store.
const scheduleRestoreEvery = time.Minute

// restoreDeletedSchedules stores again, as new schedules, those this
// Client defines that are no longer stored (deleted by a process that
// does not define them), and says so: the configuration still asks for
// them, and a schedule without its row fires nowhere.
func (c *Client) restoreDeletedSchedules(ctx context.Context) error {
	c.schedSync.Lock() // no AddSchedules or RemoveSchedules meanwhile
	defer c.schedSync.Unlock()
	names := c.scheduleNames()
	if len(names) == 0 {
		return nil
	}
	rows, err := c.store.Reader().ScheduleList(ctx, &store.ScheduleListParams{Names: names})
	if err != nil || len(rows) == len(names) { // the common case: nothing deleted, nothing written
		return err
	}
	stored := map[string]bool{}
	for _, r := range rows {
		stored[r.Name] = true
	}
	var missing []Schedule
	var restored []string
	c.schedMu.Lock()
	for _, n := range names {
		if s, ok := c.schedules[n]; ok && !stored[n] {
			missing = append(missing, s)
			restored = append(restored, n)
		}
	}
	c.schedMu.Unlock()
	if err := c.syncSchedules(ctx, missing); err != nil {
		return err
	}
	if len(restored) > 0 {
		c.log.Warn("schedules this process defines were deleted from the store; stored again as new schedules (remove them from the configuration of every process before deleting them)",
			"instance", c.cfg.InstanceID, "schedules", strings.Join(restored, ","))
	}
	return nil
}

// syncSchedules stores defs, in name order (two processes storing the
// same schedules lock their rows in the same order).
func (c *Client) syncSchedules(ctx context.Context, defs []Schedule) error {
	if len(defs) == 0 {
		return nil
	}
	defs = slices.SortedFunc(slices.Values(defs), func(a, b Schedule) int { return strings.Compare(a.Name, b.Name) })
	names := make([]string, len(defs))
	for i, s := range defs {
		names[i] = s.Name
	}
	// The leader locks due rows in due-time order: a transaction locking
	// the same rows in name order may deadlock with it and be aborted
	// (ErrConflict), then run again.
	var err error
	for range 5 {
		if err = c.storeSchedules(ctx, defs, names); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return err
}

// storeSchedules is one try of syncSchedules.
func (c *Client) storeSchedules(ctx context.Context, defs []Schedule, names []string) error {
	return c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		rows, err := x.ScheduleList(ctx, &store.ScheduleListParams{Names: names})
		if err != nil {
			return err
		}
		byName := map[string]*dt.Schedule{}
		for _, r := range rows {
			byName[r.Name] = r
		}
		now := c.clock.Now().Truncate(time.Microsecond)
		var put []*dt.Schedule
		for _, s := range defs {
			sp, _ := s.parse() // validated
			r := byName[s.Name]
			switch {
			case r == nil:
				put = append(put, s.stored(sp, now))
			case !s.sameTiming(r):
				n := s.stored(sp, now)
				n.Paused, n.LastDue, n.LastTask, n.CreatedAt = r.Paused, r.LastDue, r.LastTask, r.CreatedAt
				put = append(put, n)
			case s.Workflow != r.Workflow || !bytes.Equal(s.Input, r.Input) || string(s.CatchUp) != r.CatchUp:
				r.Workflow, r.Input, r.CatchUp, r.UpdatedAt = s.Workflow, s.Input, string(s.CatchUp), now
				put = append(put, r)
			}
		}
		return x.SchedulePut(ctx, &store.SchedulePutParams{Schedules: put})
	})
}

// scheduleNames are the schedules this Client fires, in name order.
func (c *Client) scheduleNames() []string {
	c.schedMu.Lock()
	defer c.schedMu.Unlock()
	return slices.Sorted(maps.Keys(c.schedules))
}

// wakeScheduleLeader makes the schedule leader of this process, if it
// runs, look at the schedules again at once.
func (c *Client) wakeScheduleLeader() {
	select {
	case c.schedWake <- struct{}{}:
	default:
	}
}

// Schedules lists the stored schedules, in name order.
func (c *Client) Schedules(ctx context.Context) ([]ScheduleState, error) {
	rows, err := c.store.Reader().ScheduleList(ctx, &store.ScheduleListParams{})
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleState, len(rows))
	for i, r := range rows {
		out[i] = stateOf(r)
	}
	return out, nil
}

// GetSchedule returns the stored schedule name, or ErrScheduleNotFound.
func (c *Client) GetSchedule(ctx context.Context, name string) (*ScheduleState, error) {
	rows, err := c.store.Reader().ScheduleList(ctx, &store.ScheduleListParams{Names: []string{name}})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	st := stateOf(rows[0])
	return &st, nil
}

// changeSchedule runs fn on the stored schedule name, locked, in a
// transaction, and stores what fn left.
func (c *Client) changeSchedule(ctx context.Context, name string, fn func(ctx context.Context, x store.Executor, r *dt.Schedule, now time.Time) error) (*ScheduleState, error) {
	var st ScheduleState
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		rows, err := x.ScheduleList(ctx, &store.ScheduleListParams{Names: []string{name}})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
		}
		r := rows[0]
		now := c.clock.Now().Truncate(time.Microsecond)
		if err := fn(ctx, x, r, now); err != nil {
			return err
		}
		r.UpdatedAt = now
		st = stateOf(r)
		return x.SchedulePut(ctx, &store.SchedulePutParams{Schedules: []*dt.Schedule{r}})
	})
	if err != nil {
		return nil, err
	}
	c.wakeScheduleLeader()
	return &st, nil
}

// PauseSchedule pauses schedule name: none of its due times fire until
// it is resumed (pausing a paused schedule changes nothing).
func (c *Client) PauseSchedule(ctx context.Context, name string) (*ScheduleState, error) {
	return c.changeSchedule(ctx, name, func(_ context.Context, _ store.Executor, r *dt.Schedule, _ time.Time) error {
		r.Paused = true
		return nil
	})
}

// ResumeSchedule resumes a paused schedule: it is next due at its first
// due time after now; the due times that passed while it was paused do
// not fire. Resuming a running schedule changes nothing.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*ScheduleState, error) {
	return c.changeSchedule(ctx, name, func(_ context.Context, _ store.Executor, r *dt.Schedule, now time.Time) error {
		if !r.Paused {
			return nil
		}
		sp, p := scheduleOf(r).parse()
		if p != "" {
			return fmt.Errorf("%w %q: %s", ErrInvalidSchedule, name, p)
		}
		r.Paused = false
		if !r.NextDue.After(now) {
			r.NextDue = sp.next(r.NextDue, now)
		}
		return nil
	})
}

// DeleteSchedule deletes the stored schedule name, which no longer fires;
// the tasks it submitted stay. Delete a schedule once it is gone from
// every process's configuration: a Client that defines it refuses
// (ErrScheduleDefined); a process that still defines it stores it again,
// as a new schedule, when it starts or adds its schedules, and, if it is
// the schedule leader (the Supervisor role, with schedules), within about
// a minute, logging a warning. A schedule not stored is
// ErrScheduleNotFound.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	c.schedSync.Lock()
	defer c.schedSync.Unlock()
	if c.DefinesSchedule(name) {
		return fmt.Errorf("%w: %q is in the configuration of this server or program (a workflow file, or Config.Schedules); remove it there first, or it is stored again", ErrScheduleDefined, name)
	}
	err := c.store.InTx(ctx, func(ctx context.Context, x store.Executor) error {
		n, err := x.ScheduleDelete(ctx, &store.ScheduleDeleteParams{Names: []string{name}})
		if err == nil && n == 0 {
			err = fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
		}
		return err
	})
	if err != nil {
		return err
	}
	c.wakeScheduleLeader()
	return nil
}

// RunScheduleNow submits schedule name's workflow with its input at once,
// outside its due times, paused or not, and returns the task. id is the
// task's ID, for a retry that must not submit twice; "" gives
// "schedule:<name>:run:<UUID>". The schedule's due times do not change.
// The Client must know the schedule's workflow.
func (c *Client) RunScheduleNow(ctx context.Context, name, id string) (*Task, error) {
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		id = "schedule:" + name + ":run:" + u.String()
	}
	var task *Task
	_, err := c.changeSchedule(ctx, name, func(ctx context.Context, x store.Executor, r *dt.Schedule, _ time.Time) error {
		p, err := c.prepare(ctx, SubmitParams{Workflow: r.Workflow, Input: r.Input, Options: SubmitOptions{ID: id}})
		if err != nil {
			return err
		}
		ts, err := flow.Submit(ctx, x, []flow.Submission{{Task: p.task, Steps: p.steps}})
		if err != nil {
			return err
		}
		task = ts[0]
		r.LastTask = task.ID
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.wakeSchedulers()
	return task, nil
}

// fire is the leader's step: it submits the tasks of the due schedules
// this Client fires and advances them, in the caller's transaction fenced
// by sv, at most limit tasks; it returns how many schedules and tasks it
// handled (limit: call again).
func (c *Client) fire(ctx context.Context, x store.Executor, sv *flow.Leader, now time.Time, limit int) (int, error) {
	if err := sv.CheckLeader(ctx, x, now); err != nil {
		return 0, err
	}
	due, err := x.ScheduleDue(ctx, &store.ScheduleDueParams{Names: c.scheduleNames(), Before: now, Limit: limit})
	if err != nil || len(due) == 0 {
		return 0, err
	}
	now = now.Truncate(time.Microsecond)
	var (
		subs   []flow.Submission
		ids    []string
		budget = limit
	)
	for _, r := range due {
		sp, p := scheduleOf(r).parse()
		if p != "" {
			c.log.Error("schedule not fired: its stored definition is invalid", "schedule", r.Name, "problem", p)
			continue
		}
		fired, next := dueTimes(r, sp, now, budget)
		budget -= len(fired)
		r.NextDue, r.UpdatedAt = next, now
		for _, d := range fired {
			id := ScheduleTaskID(r.Name, d)
			p, err := c.prepare(ctx, SubmitParams{Workflow: r.Workflow, Input: r.Input, Options: SubmitOptions{ID: id}})
			if err != nil {
				c.log.Error("schedule's due time not fired", "schedule", r.Name, "due", d, "err", err)
				continue
			}
			subs = append(subs, flow.Submission{Task: p.task, Steps: p.steps})
			ids = append(ids, id)
			r.LastDue, r.LastTask = &d, id
		}
		if budget <= 0 {
			break
		}
	}
	// A task of a due time stored already (by a definition since changed)
	// is left as it is.
	stored, err := x.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: ids})
	if err != nil {
		return 0, err
	}
	if len(stored) > 0 {
		have := map[string]bool{}
		for _, t := range stored {
			have[t.ID] = true
		}
		subs = slices.DeleteFunc(subs, func(s flow.Submission) bool { return have[s.Task.ID] })
	}
	if len(subs) > 0 {
		if _, err := flow.Submit(ctx, x, subs); err != nil {
			return 0, err
		}
	}
	if err := x.SchedulePut(ctx, &store.SchedulePutParams{Schedules: due}); err != nil {
		return 0, err
	}
	return max(len(due), limit-budget), nil
}

// dueTimes are the due times of r to fire at now under its catch-up
// policy, at most budget, and its next due time after them.
func dueTimes(r *dt.Schedule, sp scheduleSpec, now time.Time, budget int) (fired []time.Time, next time.Time) {
	anchor := r.NextDue
	if CatchUpPolicy(r.CatchUp) == CatchUpAll {
		d := r.NextDue
		for !d.After(now) && len(fired) < budget && !d.IsZero() {
			fired = append(fired, d)
			d = sp.next(anchor, d)
		}
		return fired, d
	}
	last := sp.latest(r.NextDue, now)
	next = sp.next(anchor, last)
	if CatchUpPolicy(r.CatchUp) == CatchUpSkip && now.Sub(last) > MissedAfter {
		return nil, next
	}
	return []time.Time{last}, next
}

// scheduleRunner is the leader of the schedules: while it holds the
// lease it fires due schedules, and it sleeps until the next due time
// (or a third of the lease's TTL, to renew it).
func (c *Client) scheduleRunner() *maintenance.Runner {
	return &maintenance.Runner{Driver: c.store, Clock: c.clock, Log: c.log, Lease: scheduleLease, Instance: c.cfg.InstanceID,
		LeaseTTL: c.cfg.LeaseTTL, Batch: 500, Trace: c.tracer}
}

func (c *Client) scheduleService() maintenance.Service {
	return maintenance.Service{Name: "schedules", Step: c.fire, After: c.wakeSchedulers}
}

// runSchedules leads the schedules until ctx ends, then resigns.
func (c *Client) runSchedules(ctx context.Context, r *maintenance.Runner) {
	el := r.Elector()
	svc := c.scheduleService()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var restoreAt time.Time
	for {
		wait := r.LeaseTTL / 3
		// A process without schedules takes no part: it would only hold
		// the lease another process needs.
		if len(c.scheduleNames()) == 0 {
			if r.Term() != 0 {
				_ = el.Resign(ctx)
			}
		} else if _, err := el.TryAcquire(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("schedule lease", "instance", c.cfg.InstanceID, "err", err)
		}
		if r.Term() != 0 {
			if now := c.clock.Now(); !now.Before(restoreAt) {
				restoreAt = now.Add(scheduleRestoreEvery)
				if err := c.restoreDeletedSchedules(ctx); err != nil && ctx.Err() == nil {
					c.log.Warn("schedules: store again the deleted ones", "instance", c.cfg.InstanceID, "err", err)
				}
			}
			if _, err := r.RunService(ctx, svc); err != nil && ctx.Err() == nil {
				c.log.Warn("schedules", "instance", c.cfg.InstanceID, "err", err)
			}
			next, err := c.store.Reader().ScheduleDue(ctx, &store.ScheduleDueParams{Names: c.scheduleNames(),
				Before: c.clock.Now().Add(wait), Limit: 1})
			if err == nil && len(next) == 1 {
				wait = min(wait, notifier.Until(c.clock.Now(), 5*time.Millisecond, wait, next[0].NextDue)) // renewals first
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			_ = el.Resign(context.WithoutCancel(ctx))
			return
		case <-timer.C:
		case <-c.schedWake:
		}
	}
}
