package cli

import (
	"bytes"
	"fmt"
	"io"

	"github.com/drover-run/drover"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/spf13/cobra"
)

// maxSignalPayload caps --payload read from standard input.
const maxSignalPayload = drover.DefaultMaxInputBytes

func (e *env) signalCmd() *cobra.Command {
	var payload, id string
	cmd := &cobra.Command{
		Use:   "signal TASK NAME",
		Short: "Send a signal to a task (an approval, a callback)",
		Long: `signal sends the signal NAME to a task. If the task's current step waits for
that signal, the step completes with the payload as its output and the task
goes on; otherwise the signal is kept and the next step of the task that
waits for NAME takes it. --payload is one JSON document ("-" reads it from
standard input; without it the payload is null). --id makes the signal
idempotent: a second signal with the same ID (and name) is ignored. A final
task refuses signals. A task ID starting with "-" is given after "--".`,
		Example: `  drover signal order-o-7 approved --payload '{"by":"ann"}'
  drover signal order-o-7 approved --id approval-o-7 --server http://drover:8080`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := checkTaskIDArg("", args[0]); err != nil {
				return err
			}
			if err := checked("", "signal name", args[1], dt.NameProblem(args[1])); err != nil {
				return err
			}
			if cmd.Flags().Changed("id") {
				if err := checked("--id", "signal ID", id, dt.NameProblem(id)); err != nil {
					return err
				}
			}
			body := []byte(payload)
			if payload == "-" {
				b, err := io.ReadAll(io.LimitReader(e.Stdin, maxSignalPayload+1))
				if err != nil {
					return fmt.Errorf("read the payload from stdin: %w", err)
				}
				body = b
			}
			body = bytes.TrimSpace(body)
			if len(body) > maxSignalPayload {
				return fmt.Errorf("%w: --payload of more than %d bytes", drover.ErrInputTooLarge, maxSignalPayload)
			}
			if len(body) > 0 && !jsonValid(body) {
				return clicore.Usagef("--payload is not a JSON document: %s", jsonProblem(body))
			}
			b, err := e.tasks(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			res, err := b.Signal(ctx, drover.SignalParams{TaskID: args[0], Name: args[1], ID: id, Payload: body, Sender: "cli"})
			if err != nil {
				return err
			}
			if e.JSON {
				return clicore.WriteJSON(e.Stdout, map[string]any{"name": args[1], "id": res.ID, "duplicate": res.Duplicate,
					"delivered": res.Delivered, "task": taskJSON(res.Task)})
			}
			switch {
			case res.Duplicate:
				fmt.Fprintf(e.Stdout, "signal %s (ID %s) to %s: a duplicate, ignored; task %s\n", args[1], res.ID, args[0], res.Task.ProcessState)
			case res.Delivered:
				fmt.Fprintf(e.Stdout, "signal %s (ID %s) completed the waiting step of %s: now %s\n", args[1], res.ID, args[0], res.Task.ProcessState)
			default:
				fmt.Fprintf(e.Stdout, "signal %s (ID %s) kept for %s: no step waits for it now (%s)\n", args[1], res.ID, args[0], res.Task.ProcessState)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&payload, "payload", "", `the payload, a JSON document ("-": standard input)`)
	cmd.Flags().StringVar(&id, "id", "", "the signal's ID, to ignore a repeat (default: a new one)")
	return cmd
}
