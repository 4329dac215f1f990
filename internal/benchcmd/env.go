package benchcmd

import (
	"github.com/drover-run/drover/internal/clicore"
	"github.com/spf13/cobra"
)

// env is the invocation the commands run in.
type env struct{ *clicore.Env }

// Command is "drover bench" with its subcommands, run in e.
func Command(e *clicore.Env) *cobra.Command { return (&env{e}).benchCmd() }
