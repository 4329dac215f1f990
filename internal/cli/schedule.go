package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/backend"
	"github.com/drover-run/drover/internal/clicore"
)

// The "drover schedule" commands: the recurring schedules of the servers'
// configuration (Go, or the schedules: of workflow files), their next due
// times, pause, resume, run now and delete.

// withSchedules runs fn on the schedule commands' backend, then closes it.
func (e *env) withSchedules(ctx context.Context, fn func(b backend.Schedules) error) error {
	b, err := backend.OpenSchedules(ctx, e.Env, e.remote)
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(b)
}

func (e *env) scheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "List, pause, resume, run and delete recurring schedules",
		Long: `schedule shows and controls the recurring schedules the servers fire: each
submits a workflow with a given input at the due times of a cron expression
(in a time zone) or of a fixed interval, one task per due time, named
schedule:NAME:DUE-TIME. Schedules are defined in the servers' configuration
(the schedules: section of a workflow file, or drover.Config.Schedules); these
commands read and change their state in the database (or, with --server,
through a server's API; pause, resume, run and delete need an operator
token). A schedule removed from every server's configuration stays stored,
and listed, until deleted.`,
		Example: `  drover schedule list
  drover schedule show nightly-report
  drover schedule pause nightly-report
  drover schedule resume nightly-report
  drover schedule run nightly-report --id nightly-report-rerun-1
  drover schedule delete old-report`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(e.scheduleListCmd(), e.scheduleShowCmd(), e.scheduleChangeCmd("pause"), e.scheduleChangeCmd("resume"), e.scheduleRunCmd(), e.scheduleDeleteCmd())
	return cmd
}

// scheduleTiming is a schedule's timing in one line.
func scheduleTiming(s *droverapi.Schedule) string {
	if s.Cron != "" {
		tz := s.TimeZone
		if tz == "" {
			tz = "UTC"
		}
		return fmt.Sprintf("cron %q %s", s.Cron, tz)
	}
	return "every " + (time.Duration(s.EverySeconds) * time.Second).String()
}

func scheduleStateText(s *droverapi.Schedule) string {
	if s.Paused {
		return "paused"
	}
	return "active"
}

func firstDue(s *droverapi.Schedule) *time.Time {
	if len(s.NextDue) == 0 {
		return nil
	}
	return &s.NextDue[0]
}

func (e *env) scheduleListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the schedules with their next due time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return e.withSchedules(ctx, func(b backend.Schedules) error {
				ss, err := b.List(ctx)
				if err != nil {
					return err
				}
				if e.JSON {
					return clicore.WriteJSON(e.Stdout, droverapi.ScheduleList{Schedules: append([]droverapi.Schedule{}, ss...)})
				}
				tw := newTable(e.Stdout)
				row(tw, "NAME", "WORKFLOW", "TIMING", "CATCH-UP", "STATE", "NEXT DUE", "LAST TASK")
				for i := range ss {
					s := &ss[i]
					row(tw, s.Name, s.Workflow, scheduleTiming(s), s.CatchUp, scheduleStateText(s), fmtTime(firstDue(s)), dash(s.LastTask))
				}
				return tw.Flush()
			})
		},
	}
}

// printSchedule prints one schedule, with its next due times.
func (e *env) printSchedule(s *droverapi.Schedule) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, s)
	}
	tw := newTable(e.Stdout)
	row(tw, "name:", s.Name)
	row(tw, "workflow:", s.Workflow)
	row(tw, "input:", string(s.Input))
	row(tw, "timing:", scheduleTiming(s))
	row(tw, "catch-up:", s.CatchUp)
	row(tw, "state:", scheduleStateText(s))
	next := make([]string, len(s.NextDue))
	for i := range s.NextDue {
		next[i] = fmtTime(&s.NextDue[i])
	}
	row(tw, "next due:", dash(strings.Join(next, ", ")))
	row(tw, "last due:", fmtTime(s.LastDue))
	row(tw, "last task:", dash(s.LastTask))
	return tw.Flush()
}

func (e *env) scheduleShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a schedule and its next due times",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return e.withSchedules(ctx, func(b backend.Schedules) error {
				s, err := b.Get(ctx, args[0])
				if err != nil {
					return err
				}
				return e.printSchedule(s)
			})
		},
	}
}

// scheduleChangeCmd is "pause" or "resume".
func (e *env) scheduleChangeCmd(action string) *cobra.Command {
	short := "Pause a schedule: none of its due times fire until it is resumed"
	if action == "resume" {
		short = "Resume a paused schedule from its next due time after now"
	}
	return &cobra.Command{
		Use:   action + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return e.withSchedules(ctx, func(b backend.Schedules) error {
				change := b.Pause
				if action == "resume" {
					change = b.Resume
				}
				s, err := change(ctx, args[0])
				if err != nil {
					return err
				}
				if e.JSON {
					return clicore.WriteJSON(e.Stdout, s)
				}
				fmt.Fprintf(e.Stdout, "schedule %s %s; next due %s\n", s.Name, scheduleStateText(s), fmtTime(firstDue(s)))
				return nil
			})
		},
	}
}

func (e *env) scheduleRunCmd() *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "run NAME",
		Short: "Submit a schedule's task now, outside its due times",
		Long: `run submits the schedule's workflow with its input at once, paused or not,
and prints the task's ID. Its due times do not change. --id names the task, so
that running the command again submits nothing new (default:
schedule:NAME:run:UUID).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if cmd.Flags().Changed("id") {
				if err := checkNewTaskID(id); err != nil {
					return err
				}
			}
			return e.withSchedules(ctx, func(b backend.Schedules) error {
				t, err := b.Run(ctx, args[0], id)
				if err != nil {
					return err
				}
				return e.printNewTask(t)
			})
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "the task's ID, for an idempotent run (default: schedule:NAME:run:UUID)")
	return cmd
}

func (e *env) scheduleDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule removed from the servers' configuration",
		Long: `delete deletes a stored schedule: it no longer fires, and is no longer
listed. The tasks it submitted stay. Delete a schedule once it is gone from
every server's configuration (a server stops firing a schedule removed from
its workflow files when it reloads them): a server that still defines it
refuses to delete it (over --server), and one that still defines it
elsewhere stores it again, as a new schedule: when it starts, and within
about a minute if it fires the schedules (the schedule leader), with a
warning in its log.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return e.withSchedules(ctx, func(b backend.Schedules) error {
				if err := b.Delete(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(e.Stderr, "drover: a process that still defines schedule %s stores it again, as a new schedule (at its start, or within about a minute if it fires the schedules)\n", args[0])
				if e.JSON {
					return clicore.WriteJSON(e.Stdout, map[string]any{"deleted": args[0]})
				}
				fmt.Fprintf(e.Stdout, "schedule %s deleted\n", args[0])
				return nil
			})
		},
	}
}
