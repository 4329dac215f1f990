package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/clicore"
)

// The "drover alerts" commands: operator alerts and their
// acknowledgements. An acknowledgement is an event of type
// alert_acknowledged on the alert's subject with the message
// "acknowledged alert <id>", the same record the HTTP API writes
// (docs/server.md), so both paths see each other's acknowledgements.

// AlertJSON is an alert as printed with --json (the API's shape).
type AlertJSON struct {
	ID           int64     `json:"id"`
	Subject      string    `json:"subject"` // task ID, or "session:<queue>/<session>"
	Step         *int      `json:"step"`
	Type         string    `json:"type"`
	State        string    `json:"state"`
	Actor        string    `json:"actor,omitempty"`
	Attempt      int       `json:"attempt,omitempty"`
	Message      string    `json:"message,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	Acknowledged *AckJSON  `json:"acknowledged"`
}

// AckJSON is an acknowledgement as printed with --json.
type AckJSON = droverapi.Ack

func alertFromAPI(a *droverapi.Alert) AlertJSON {
	j := AlertJSON{ID: a.ID, Subject: a.Subject, Type: a.Type, State: a.State, Actor: a.Actor, Attempt: a.Attempt,
		Message: a.Message, CreatedAt: a.CreatedAt}
	if a.StepIndex >= 0 {
		i := a.StepIndex
		j.Step = &i
	}
	j.Acknowledged = a.Acknowledged
	return j
}

func (e *env) alertsCmd() *cobra.Command {
	var (
		after   int64
		limit   int
		unacked bool
	)
	cmd := &cobra.Command{
		Use:   "alerts",
		Short: "List operator alerts and whether they were acknowledged",
		Long: `alerts lists the operator alerts by ID — tasks that ended in Error, permanent
step failures, sessions blocked by a dead letter — each with its
acknowledgement, if any. --unacknowledged leaves out acknowledged ones. Page
with --limit and --after (the "next_after" of the JSON output).

"drover alerts ack ID" acknowledges an alert: an event of type
alert_acknowledged is recorded on the alert's task (or session) and shows in
its history. Acknowledging again changes nothing.`,
		Example: `  drover alerts --unacknowledged
  drover alerts ack 17
  drover alerts --server http://127.0.0.1:8080 --token-file token --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if after < 0 {
				return clicore.Usagef("--after must be 0 or more, got %d", after)
			}
			if limit < 1 || limit > 1000 {
				return clicore.Usagef("--limit must be 1-1000, got %d", limit)
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			page, next, err := b.Alerts(ctx, drover.AlertQuery{AfterID: after, Limit: limit, Unacknowledged: unacked})
			if err != nil {
				return err
			}
			alerts := []AlertJSON{}
			for i := range page {
				alerts = append(alerts, alertFromAPI(&page[i]))
			}
			if e.JSON {
				out := struct {
					Alerts    []AlertJSON `json:"alerts"`
					NextAfter int64       `json:"next_after,omitempty"`
				}{Alerts: alerts, NextAfter: next}
				return clicore.WriteJSON(e.Stdout, out)
			}
			tw := newTable(e.Stdout)
			row(tw, "ID", "TIME", "SUBJECT", "STEP", "TYPE", "STATE", "ACKNOWLEDGED", "MESSAGE")
			for _, a := range alerts {
				step, ack := "-", "-"
				if a.Step != nil {
					step = strconv.Itoa(*a.Step)
				}
				if a.Acknowledged != nil {
					ack = fmt.Sprintf("%s by %s", fmtTime(&a.Acknowledged.At), a.Acknowledged.Actor)
				}
				row(tw, strconv.FormatInt(a.ID, 10), fmtTime(&a.CreatedAt), a.Subject, step, a.Type, a.State, ack, dash(clip(a.Message, 100)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != 0 {
				fmt.Fprintf(e.Stderr, "more alerts may follow: --after %d\n", next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&after, "after", 0, "only alerts with an ID greater than this")
	f.IntVar(&limit, "limit", 100, "at most this many alerts (1-1000)")
	f.BoolVar(&unacked, "unacknowledged", false, "leave out acknowledged alerts")
	cmd.AddCommand(e.alertsAckCmd())
	return cmd
}

func (e *env) alertsAckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ack ALERT-ID",
		Short: "Acknowledge an operator alert",
		Long: `ack records that an operator saw alert ALERT-ID (from "drover alerts" or
"drover events --alerts"): an event of type alert_acknowledged on the alert's
task or session, with the actor "cli" (over --server, the server's actor).
Acknowledging an alert again changes nothing and shows the first
acknowledgement. It does not change the task: resubmit it to retry.`,
		Example: `  drover alerts ack 17
  drover alerts ack 17 --server http://127.0.0.1:8080 --token-file operator-token --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return clicore.Usagef("ALERT-ID %q: want an alert's ID, a positive integer", args[0])
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			a, err := b.AckAlert(ctx, id)
			if err != nil {
				return err
			}
			out := alertFromAPI(a)
			if e.JSON {
				return clicore.WriteJSON(e.Stdout, out)
			}
			if out.Acknowledged != nil {
				fmt.Fprintf(e.Stdout, "alert %d (%s, %s) acknowledged by %s at %s\n", out.ID, out.Subject, out.Type, out.Acknowledged.Actor, fmtTime(&out.Acknowledged.At))
			}
			return nil
		},
	}
}
