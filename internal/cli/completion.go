package cli

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/store"
)

// Shell completion of task IDs and workflow names reads the local store:
// at most completionLimit rows, within completionTimeout, and nothing at all
// (no error in the shell) when the store cannot be read.
const (
	completionLimit   = 100
	completionTimeout = 2 * time.Second
)

// completionStore opens the store named by --db, $DROVER_DATABASE_URL or
// the config file for a completion, or returns nil. It never creates or
// migrates anything, and gives up on a locked SQLite file quickly.
func (e *env) completionStore(ctx context.Context, cmd *cobra.Command) *clicore.Database {
	if e.resolveSettings(cmd) != nil {
		return nil
	}
	t, err := e.Target()
	if err != nil {
		return nil
	}
	e.LockTimeout = completionTimeout / 4
	d, err := e.Connect(ctx, t, clicore.OpenOpts{})
	if err != nil {
		return nil
	}
	return d
}

// completeTaskIDs completes a TASK argument with the IDs of stored tasks
// that start with what was typed.
func (e *env) completeTaskIDs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return e.taskIDs(cmd, toComplete), cobra.ShellCompDirectiveNoFileComp
}

func (e *env) taskIDs(cmd *cobra.Command, prefix string) []string {
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	d := e.completionStore(ctx, cmd)
	if d == nil {
		return nil
	}
	defer d.Close()
	// IDs are listed in ID order from the first above the prefix.
	tasks, err := d.Reader().TaskList(ctx, &store.TaskListParams{AfterID: prefix, Limit: completionLimit})
	if err != nil {
		return nil
	}
	var ids []string
	for _, t := range tasks {
		if !strings.HasPrefix(t.ID, prefix) {
			break
		}
		ids = append(ids, t.ID)
	}
	return ids
}

// completeWorkflows completes a workflow name: the stored declarative
// workflows and the demo's orders.
func (e *env) completeWorkflows(cmd *cobra.Command, toComplete string) ([]string, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	names := map[string]bool{"orders": true}
	if d := e.completionStore(ctx, cmd); d != nil {
		defs, err := d.Reader().WorkflowDefList(ctx, &store.WorkflowDefListParams{})
		d.Close()
		if err == nil {
			for _, w := range defs {
				names[w.Name] = true
			}
		}
	}
	var out []string
	for n := range names {
		if strings.HasPrefix(n, toComplete) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeWorkflowArg completes the WORKFLOW argument of submit.
func (e *env) completeWorkflowArg(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveDefault // INPUT-JSON or -: no names to offer
	}
	return e.completeWorkflows(cmd, toComplete)
}

// setupCompletion turns on cobra's completion command and registers the
// dynamic completions.
func (e *env) setupCompletion(root *cobra.Command) {
	root.CompletionOptions.HiddenDefaultCmd = false
	root.CompletionOptions.DisableDescriptions = false
	noFiles := func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "status", "resubmit", "cancel":
			c.ValidArgsFunction = e.completeTaskIDs
		case "submit":
			c.ValidArgsFunction = e.completeWorkflowArg
		case "list":
			_ = c.RegisterFlagCompletionFunc("workflow", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				return e.completeWorkflows(cmd, toComplete)
			})
		case "events":
			_ = c.RegisterFlagCompletionFunc("task", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				return e.taskIDs(cmd, toComplete), cobra.ShellCompDirectiveNoFileComp
			})
		}
		if c.ValidArgsFunction == nil && c.Args != nil && c.Name() != "help" {
			c.ValidArgsFunction = noFiles
		}
	}
}
