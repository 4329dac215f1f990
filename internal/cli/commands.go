package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/orders"
)

func (e *env) migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create the database or schema if needed and apply schema migrations",
		Long: `migrate applies every schema migration this drover embeds that is not applied
yet. On SQLite it first creates the database file named by --db if it does
not exist; on PostgreSQL it creates the schema --schema (default "drover") if
it does not exist, which needs the CREATE privilege on the database unless a
DBA made the schema beforehand. It is safe to run again and safe to run while
servers use the database (concurrent migrators take turns). It prints the
schema version before and after.

The other commands never create anything: on a database or schema that is not
migrated they fail and say to run "drover migrate".`,
		Example: `  drover migrate --db sqlite:./drover.db
  DROVER_DATABASE_URL=sqlite:/var/lib/drover/drover.db drover migrate --json
  drover migrate --db 'postgres://drover@db:5432/app?sslmode=disable' --schema drover`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			t, err := e.Target()
			if err != nil {
				return err
			}
			d, err := e.Connect(ctx, t, clicore.OpenOpts{Create: true, LockTimeout: true})
			if err != nil {
				return err
			}
			defer d.Close()
			before, after, latest, err := d.MigrateAll(ctx)
			if err != nil {
				return err
			}
			if e.JSON {
				out := map[string]any{"db": d.Label, "driver": d.DriverName(), "from_version": before, "to_version": after, "latest_version": latest}
				if t.Postgres {
					out["schema"] = t.Schema
				}
				return clicore.WriteJSON(e.Stdout, out)
			}
			if before == after {
				fmt.Fprintf(e.Stdout, "database %s is up to date at schema version %d\n", d.Desc(), after)
			} else {
				fmt.Fprintf(e.Stdout, "database %s migrated from schema version %d to %d\n", d.Desc(), before, after)
			}
			return nil
		},
	}
}

func (e *env) submitCmd() *cobra.Command {
	var (
		id          string
		orderingKey string
		callbackURL string
		callbackEvs []string
		maxInput    int
		stepTimeout time.Duration
		at          string
		in          time.Duration
		priority    int
	)
	cmd := &cobra.Command{
		Use:   "submit WORKFLOW [INPUT-JSON|-]",
		Short: "Submit a task",
		Long: `submit records a new task of WORKFLOW in the database, Pending, and prints its
ID. A running "drover server" picks it up. INPUT-JSON is the task input, one
JSON document; "-" reads it from standard input; without it the input is null.

With --id the submission is idempotent: submitting the same ID with the same
workflow, input (compared as JSON: key order and spacing do not matter),
--ordering-key, --callback-url and --callback-events again returns the
existing task; with any of them different it fails, saying which. Without
--id a time-ordered UUID is generated. A task ID is 1-200 bytes of valid
UTF-8, printable, without spaces or "/", and does not start with "-"; --id ""
is refused.

With --ordering-key the task starts only after every task submitted earlier
with the same key is final (Processed, Error, Compensated or Cancelled):
tasks sharing a key run one at a time, in submission order; tasks with
different keys, or none, run in parallel. "drover status" shows the key and
the task's position in it.

Workflows: the declarative workflows a server loaded into the database
("drover server --workflows DIR"), with the highest stored version of each,
and orders, the demo's workflow, which only a "drover server --demo" runs;
its input is {"order_id":"o-1","amount":1234} (both fields required, no
others). A declarative workflow named orders is submitted as declared.
After a file was reverted to earlier content the servers use that earlier
version again; submit with --server to get exactly what the server runs.

With --at TIME (RFC 3339, e.g. 2026-12-01T09:00:00Z) or --in DURATION (e.g.
90m) the task waits Pending, unclaimed, until then (at most 10 years ahead),
and can be cancelled meanwhile; "drover status" shows when it starts.

--priority N (0 to 10, default: the workflow's, 0 unless it sets one) puts
the task ahead of lower priorities among the tasks waiting to start, aged
one minute per level: a task waits at most that long per level of
difference behind higher ones, however many keep arriving.

With --callback-url the server POSTs a signed webhook (HMAC-SHA256) to the
URL when the task reaches a final state; --callback-events chooses other
events too: final, alerts (every operator alert of the task: a permanent
failure, a failure that starts compensation, an extended wait, an Error),
or event types (processed, compensated, error, cancelled, step_failed,
step_waiting).

The database (on PostgreSQL, the schema --schema) must exist and be migrated
("drover migrate"). With --server the task is submitted to a running server
instead, which knows its own workflows (also declarative ones).`,
		Example: `  drover submit orders '{"order_id":"o-1","amount":1234}'
  drover submit orders '{"order_id":"o-5","amount":10}' --server http://127.0.0.1:8080 --token-file token
  drover submit orders '{"order_id":"o-2","amount":50}' --id order-o-2 --json
  echo '{"order_id":"o-3","amount":7}' | drover submit orders -
  drover submit orders '{"order_id":"o-4","amount":9}' --ordering-key customer-42
  drover submit orders '{"order_id":"o-6","amount":3}' --in 2h
  drover submit orders '{"order_id":"o-7","amount":99}' --priority 5`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if maxInput <= 0 {
				return clicore.Usagef("--max-input-bytes must be positive, got %d", maxInput)
			}
			if stepTimeout <= 0 {
				return clicore.Usagef("--step-timeout must be positive, got %s", stepTimeout)
			}
			if cmd.Flags().Changed("id") {
				if err := checkNewTaskID(id); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("ordering-key") {
				if err := checkOrderingKey(orderingKey); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("callback-url") {
				if err := drover.ValidateCallbackURL(callbackURL); err != nil || callbackURL == "" {
					return clicore.Usagef("--callback-url %q: want an absolute http:// or https:// URL (%v)", callbackURL, err)
				}
			}
			if cmd.Flags().Changed("callback-events") {
				if _, err := drover.ValidateCallbackEvents(callbackURL, callbackEvs); err != nil || len(callbackEvs) == 0 {
					if err == nil {
						err = errors.New("no events given")
					}
					return clicore.Usagef("--callback-events: %v", err)
				}
			}
			var runAt time.Time
			if cmd.Flags().Changed("at") {
				if cmd.Flags().Changed("in") {
					return clicore.Usagef("--at and --in are both given; give one")
				}
				var err error
				if runAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
					return clicore.Usagef("--at %q: want a time like 2026-12-01T09:00:00Z (RFC 3339, with a zone)", at)
				}
			}
			if cmd.Flags().Changed("in") && (in < 0 || in > drover.MaxDelay) {
				return clicore.Usagef("--in %s: want a duration from 0 to 10 years (87600h)", in)
			}
			var prio *int
			if cmd.Flags().Changed("priority") {
				if priority < 0 || priority > drover.MaxPriority {
					return clicore.Usagef("--priority %d: want an integer from 0 (lowest) to %d", priority, drover.MaxPriority)
				}
				prio = &priority
			}
			if e.remote != nil && cmd.Flags().Changed("step-timeout") {
				return clicore.Usagef("--step-timeout does not apply with --server: the server's workflow sets the time budgets")
			}
			workflow := args[0]
			var input []byte
			if len(args) == 2 {
				if args[1] == "-" {
					b, err := io.ReadAll(io.LimitReader(e.Stdin, int64(maxInput)+1))
					if err != nil {
						return fmt.Errorf("read input from stdin: %w", err)
					}
					input = b
				} else {
					input = []byte(args[1])
				}
			}
			if len(input) > maxInput {
				return fmt.Errorf("%w: more than %d bytes (--max-input-bytes)", drover.ErrInputTooLarge, maxInput)
			}
			input = bytes.TrimSpace(input)
			// Against a server, the server knows its workflows and checks
			// the input beyond this.
			if len(input) > 0 && !jsonValid(input) {
				return fmt.Errorf("%w: not a JSON document: %s", drover.ErrInvalidInput, jsonProblem(input))
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			t, err := b.Submit(ctx, workflow, input, &drover.SubmitOptions{ID: id, OrderingKey: orderingKey,
				CallbackURL: callbackURL, CallbackEvents: callbackEvs, RunAt: runAt, Delay: in, Priority: prio}, stepTimeout, maxInput, e.JSON)
			if err != nil {
				return err
			}
			return e.printNewTask(t)
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "task ID, for idempotent submission: 1-200 bytes of UTF-8, printable, no spaces or \"/\", not starting with \"-\" (default: a generated UUID)")
	cmd.Flags().StringVar(&orderingKey, "ordering-key", "", "run after every earlier task with this key is final (at most 256 bytes of UTF-8, no control characters)")
	cmd.Flags().StringVar(&callbackURL, "callback-url", "", "send a signed webhook to this http(s) URL when the task is final")
	cmd.Flags().StringSliceVar(&callbackEvs, "callback-events", nil, "what --callback-url receives, comma-separated: final (default), alerts, or event types")
	cmd.Flags().IntVar(&maxInput, "max-input-bytes", drover.DefaultMaxInputBytes, "largest input accepted, in bytes")
	cmd.Flags().DurationVar(&stepTimeout, "step-timeout", orders.DefaultStepTimeout, "time budget of each step of the task (recorded with it)")
	cmd.Flags().StringVar(&at, "at", "", "start the task no earlier than this time (RFC 3339, e.g. 2026-12-01T09:00:00Z)")
	cmd.Flags().DurationVar(&in, "in", 0, "start the task this long after the submit (e.g. 90m)")
	cmd.Flags().IntVar(&priority, "priority", 0, "priority among the tasks waiting to start, 0 (lowest) to 10 (default: the workflow's)")
	return cmd
}

func (e *env) statusCmd() *cobra.Command {
	var withEvents bool
	cmd := &cobra.Command{
		Use:   "status TASK",
		Short: "Show a task and all its steps",
		Long: `status shows one task's state record and every step's: ProcessState,
LockedBy (the instance holding it), CompleteBy (its deadline), FailureCount,
the attempt number (the fencing token), the idempotency key passed to the
remote service on every try, and the last error. --events adds the task's
event history (state changes, retries, supervisor recoveries, extended
waits, alerts). A task waiting for a retry back-off or an extended wait
shows "Pending until <time>".

New task IDs cannot start with "-"; one stored by an older drover is given
after "--": drover status -- -old-id.`,
		Example: `  drover status order-o-1
  drover status order-o-1 --events
  drover status order-o-1 --json | jq .steps`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkTaskIDArg("", args[0]); err != nil {
				return err
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			t, err := b.Task(ctx, args[0])
			if err != nil {
				return err
			}
			var events []*drover.Event
			if withEvents {
				if events, err = b.TaskEvents(ctx, t.ID); err != nil {
					return err
				}
				if events == nil {
					events = []*drover.Event{}
				}
			}
			return e.printStatus(t, events)
		},
	}
	cmd.Flags().BoolVar(&withEvents, "events", false, "also show the task's event history")
	return cmd
}

func parseStates(in []string) ([]drover.ProcessState, error) {
	var out []drover.ProcessState
	for _, s := range in {
		for _, part := range strings.Split(s, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			found := false
			for _, st := range []drover.ProcessState{drover.Pending, drover.Processing, drover.Processed, drover.Error, drover.Compensating, drover.Compensated, drover.Cancelled} {
				if strings.EqualFold(string(st), part) {
					out = append(out, st)
					found = true
				}
			}
			if !found {
				return nil, clicore.Usagef("--state %q: want Pending, Processing, Processed, Error, Compensating, Compensated or Cancelled", part)
			}
		}
	}
	return out, nil
}

func (e *env) listCmd() *cobra.Command {
	var (
		states   []string
		workflow string
		limit    int
		after    string
		key      string
		from     string
		before   string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks",
		Long: `list prints tasks ordered by ID, optionally only those in the given states
(--state, repeatable or comma-separated, case-insensitive), of one workflow,
of one ordering key (--ordering-key) or last updated in a time range
(--updated-from, inclusive, and --updated-before, RFC 3339). Page with --limit and --after: pass the last ID printed (or "next_after" of
the JSON output) as --after to get the next page.`,
		Example: `  drover list --state Error --state Compensated
  drover list --workflow orders --limit 50 --after order-o-49
  drover list --state error --json
  drover list --ordering-key customer-42
  drover list --updated-from 2026-01-02T14:00:00Z --updated-before 2026-01-02T15:00:00Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			sts, err := parseStates(states)
			if err != nil {
				return err
			}
			if limit <= 0 {
				return clicore.Usagef("--limit must be positive, got %d", limit)
			}
			if cmd.Flags().Changed("after") {
				if err := checkTaskIDArg("--after", after); err != nil {
					return err
				}
			}
			p := drover.ListParams{States: sts, Workflow: workflow, AfterID: after, Limit: limit, OrderingKey: key}
			if p.UpdatedFrom, err = parseTimeFlag("--updated-from", from); err != nil {
				return err
			}
			if p.UpdatedBefore, err = parseTimeFlag("--updated-before", before); err != nil {
				return err
			}
			if !p.UpdatedFrom.IsZero() && !p.UpdatedBefore.IsZero() && !p.UpdatedBefore.After(p.UpdatedFrom) {
				return clicore.Usagef("--updated-before %s is not after --updated-from %s", before, from)
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			ts, next, err := b.Tasks(ctx, p)
			if err != nil {
				return err
			}
			if e.JSON {
				out := struct {
					Tasks     []TaskJSON `json:"tasks"`
					NextAfter string     `json:"next_after,omitempty"`
				}{Tasks: []TaskJSON{}, NextAfter: next}
				for _, t := range ts {
					out.Tasks = append(out.Tasks, taskJSON(t))
				}
				return clicore.WriteJSON(e.Stdout, out)
			}
			tw := newTable(e.Stdout)
			now := time.Now()
			row(tw, "ID", "WORKFLOW", "STATE", "STEP", "ORDERING", "LOCKED_BY", "COMPLETE_BY", "FAILURES", "UPDATED", "LAST_ERROR")
			for _, t := range ts {
				row(tw, t.ID, t.Workflow, stateText(t, now), stepOf(t), ordering(t, 40),
					dash(t.LockedBy), fmtTime(t.CompleteBy), fmt.Sprint(t.FailureCount), fmtTime(&t.UpdatedAt), dash(clip(t.LastError, 60)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(e.Stderr, "more tasks may follow: --after %s\n", next)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only tasks in this state (repeatable)")
	cmd.Flags().StringVar(&workflow, "workflow", "", "only tasks of this workflow")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many tasks")
	cmd.Flags().StringVar(&after, "after", "", "only tasks whose ID sorts after this one")
	cmd.Flags().StringVar(&key, "ordering-key", "", "only tasks submitted with this ordering key")
	cmd.Flags().StringVar(&from, "updated-from", "", "only tasks last updated at or after this time (RFC 3339)")
	cmd.Flags().StringVar(&before, "updated-before", "", "only tasks last updated before this time (RFC 3339)")
	return cmd
}

// parseTimeFlag reads an RFC 3339 time flag ("" is no bound).
func parseTimeFlag(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, clicore.Usagef("%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", name, v)
	}
	return t, nil
}

func (e *env) resubmitCmd() *cobra.Command {
	var fromStep int
	cmd := &cobra.Command{
		Use:   "resubmit TASK",
		Short: "Put an Error or Cancelled task back to work",
		Long: `resubmit is the operator's answer to an alert: after fixing the cause of a
failure, put the task (Error or Cancelled) back to Pending so a scheduler runs
it again from the failed step, or from --from-step N (0-based). A task whose
compensation failed resumes compensating. Steps keep their idempotency keys,
so a remote service that already applied a step recognises the retry.
A task ID starting with "-" is given after "--": drover resubmit -- -old-id.`,
		Example: `  drover list --state Error
  drover resubmit order-o-7
  drover resubmit order-o-7 --from-step 0 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkTaskIDArg("", args[0]); err != nil {
				return err
			}
			var opts drover.ResubmitOptions
			if cmd.Flags().Changed("from-step") {
				if fromStep < 0 {
					return clicore.Usagef("--from-step must be 0 or more, got %d", fromStep)
				}
				opts.FromStep = &fromStep
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			t, err := b.Resubmit(ctx, args[0], &opts, e.JSON)
			if err != nil {
				return err
			}
			return e.printChanged(t, "resubmitted")
		},
	}
	cmd.Flags().IntVar(&fromStep, "from-step", 0, "re-run from this step index (default: the failed step)")
	return cmd
}

func (e *env) cancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel TASK",
		Short: "Cancel a task that is not final",
		Long: `cancel moves a task that is not final to Cancelled. A call already in flight
is not interrupted, but its reply is discarded. Completed steps are not
compensated. A cancelled task can be resubmitted. The reason is at most 1000
bytes of UTF-8. A task ID starting with "-" is given after "--": drover
cancel --reason why -- -old-id.`,
		Example: `  drover cancel order-o-7 --reason "customer withdrew"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkTaskIDArg("", args[0]); err != nil {
				return err
			}
			if err := checkReason(reason); err != nil {
				return err
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			t, err := b.Cancel(ctx, args[0], reason, e.JSON)
			if err != nil {
				return err
			}
			return e.printChanged(t, "cancelled")
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the event history")
	return cmd
}

// printChanged prints the answer of a resubmit or cancel (with --json the
// task with its steps).
func (e *env) printChanged(t *drover.Task, verb string) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, taskJSON(t))
	}
	fmt.Fprintf(e.Stdout, "%s %s: now %s\n", verb, t.ID, t.ProcessState)
	return nil
}

func (e *env) eventsCmd() *cobra.Command {
	var (
		taskID string
		alerts bool
		after  int64
		follow bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the event history, or follow it",
		Long: `events prints the durable event history in order: submissions, claims, step
starts and completions, retries, supervisor recoveries (step_timed_out),
compensations, and alerts (events an operator must look at). --task keeps
one task's events, --alerts only alerts, --after ID those after an event ID.

--follow keeps printing new events as they are recorded until interrupted;
resume later without missing any by passing the last ID seen as --after.
With --task it ends by itself once the task is final (Processed, Error,
Compensated or Cancelled) and its events are printed.
With --json every event is one JSON object per line.

With --server the events come from the server's event stream (Server-Sent
Events); --follow reconnects after a dropped connection and resumes after the
last event printed, so none is missed or printed twice.`,
		Example: `  drover events --alerts
  drover events --task order-o-7
  drover events --follow --after 1200 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if after < 0 {
				return clicore.Usagef("--after must be 0 or more, got %d", after)
			}
			if limit <= 0 {
				return clicore.Usagef("--limit must be positive, got %d", limit)
			}
			if cmd.Flags().Changed("task") {
				if err := checkTaskIDArg("--task", taskID); err != nil {
					return err
				}
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			if follow {
				return b.Follow(ctx, drover.Subscription{TaskID: taskID, AlertsOnly: alerts, AfterID: after}, e.printFollowed)
			}
			evs, err := b.Events(ctx, drover.EventQuery{TaskID: taskID, AlertsOnly: alerts, AfterID: after, Limit: limit})
			if err != nil {
				return err
			}
			return e.printEventList(evs)
		},
	}
	f := cmd.Flags()
	f.StringVar(&taskID, "task", "", "only this task's events")
	f.BoolVar(&alerts, "alerts", false, "only alerts")
	f.Int64Var(&after, "after", 0, "only events with an ID greater than this")
	f.BoolVar(&follow, "follow", false, "keep printing new events until interrupted (with --task: until the task is final)")
	f.IntVar(&limit, "limit", 1000, "at most this many events (without --follow)")
	return cmd
}

// printNewTask prints a task a command created: its ID, or the task as
// JSON with --json.
func (e *env) printNewTask(t *drover.Task) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, taskJSON(t))
	}
	fmt.Fprintln(e.Stdout, t.ID)
	return nil
}
