package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/droverclient"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/backend"
	"github.com/drover-run/drover/internal/clicore"
)

// The CLI against a running server: with --server URL the commands that
// read or change tasks, alerts or queues go through the HTTP API (the
// remote implementations of package backend) instead of the database, and
// print the same output.

// tasks opens the backend of the task commands.
func (e *env) tasks(ctx context.Context) (backend.Tasks, error) {
	return backend.OpenTasks(ctx, e.Env, e.remote)
}

// queues opens the backend of the queue commands; maxBody bounds a
// published body (0: the default).
func (e *env) queues(ctx context.Context, maxBody int) (backend.Queues, error) {
	return backend.OpenQueues(ctx, e.Env, e.remote, maxBody)
}

// Environment variables of --server, --token and --namespace.
const (
	EnvServer    = "DROVER_SERVER"
	EnvToken     = backend.EnvToken
	EnvNamespace = "DROVER_NAMESPACE"
)

// remoteCommands are the commands that work against a server, by path.
var remoteCommands = map[string]bool{
	"drover submit": true, "drover status": true, "drover list": true, "drover resubmit": true,
	"drover cancel": true, "drover events": true, "drover signal": true,
	"drover alerts": true, "drover alerts ack": true,
	"drover queue": true, "drover queue publish": true, "drover queue peek": true, "drover queue sessions": true,
	"drover queue list": true, "drover queue dlq": true, "drover queue resolve": true, "drover queue policy": true,
	"drover queue consume": true,
	"drover schedule":      true, "drover schedule list": true, "drover schedule show": true, "drover schedule pause": true,
	"drover schedule resume": true, "drover schedule run": true, "drover schedule delete": true,
}

// setupRemote resolves --server, --token and --token-file for cmd. With a
// server, e.remote is the server to go through; without one it stays nil and the
// command uses the database.
func (e *env) setupRemote(cmd *cobra.Command) error {
	serverFlag := e.onCommandLine(cmd, "server")
	tokenFlags := e.onCommandLine(cmd, "token") || e.onCommandLine(cmd, "token-file")
	nsFlag := e.onCommandLine(cmd, "namespace")
	if e.serverURL == "" {
		if serverFlag {
			return clicore.Usagef("--server is empty: want http://HOST:PORT or https://HOST:PORT")
		}
		if tokenFlags {
			return clicore.Usagef("--token and --token-file go with --server (or $%s)", EnvServer)
		}
		if nsFlag {
			// The database has no tokens to confine a caller: namespaces
			// are the server's.
			return clicore.Usagef("--namespace goes with --server (or $%s)", EnvServer)
		}
		return nil
	}
	if !remoteCommands[cmd.CommandPath()] {
		if serverFlag {
			return clicore.Usagef("'%s' does not work against a server: it needs the database (--db); leave out --server", cmd.CommandPath())
		}
		e.serverURL = "" // $DROVER_SERVER does not apply to this command
		return nil
	}
	if e.onCommandLine(cmd, "db") || e.onCommandLine(cmd, "schema") {
		if serverFlag {
			return clicore.Usagef("--db/--schema and --server exclude each other: give the database or the server")
		}
		e.serverURL = "" // an explicit --db wins over $DROVER_SERVER
		return nil
	}
	// The token of the most specific source: the command line, then the
	// environment, then the config file.
	token := ""
	tokenFrom, fileFrom := e.origin["token"], e.origin["token-file"]
	if !cmd.Flags().Changed("token") {
		tokenFrom = fromDefault
	}
	if !cmd.Flags().Changed("token-file") {
		fileFrom = fromDefault
	}
	switch {
	case tokenFrom != fromDefault && tokenFrom == fileFrom:
		return clicore.Usagef("--token and --token-file exclude each other%s", sourceNote(tokenFrom))
	case fileFrom > tokenFrom:
		b, err := e.readTokenFile()
		if err != nil {
			return clicore.Usagef("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" || strings.ContainsAny(token, " \t\r\n") {
			return clicore.Usagef("--token-file %s: want one token on one line", e.tokenFile)
		}
	case tokenFrom != fromDefault:
		if token = strings.TrimSpace(e.token); token == "" {
			return clicore.Usagef("--token is empty")
		}
	}
	opts := []droverclient.Option{droverclient.WithHTTPClient(&http.Client{})}
	if e.namespace != "" {
		if e.namespace != dt.DefaultNamespace {
			if p := dt.NamespaceProblem(e.namespace); p != "" {
				return clicore.Usagef("--namespace %q: %s", e.namespace, p)
			}
		}
		opts = append(opts, droverclient.WithNamespace(e.namespace))
	} else if nsFlag {
		return clicore.Usagef("--namespace is empty: want a namespace name, or leave it out for the token's own (or the default one)")
	}
	// No overall timeout: it would cut event streams; requests end with
	// the command's context.
	c, err := droverclient.New(e.serverURL, token, opts...)
	if err != nil {
		return clicore.Usagef("--server: %s", strings.TrimPrefix(err.Error(), "droverclient: "))
	}
	e.remote = &backend.Remote{Client: c, URL: e.serverURL, HasToken: token != "", Namespace: e.namespace, OnReconnect: e.reconnecting}
	return nil
}

// printStatus prints a task with its steps and, when not nil, its events.
func (e *env) printStatus(t *drover.Task, events []*drover.Event) error {
	if e.JSON {
		j := taskJSON(t)
		for _, ev := range events {
			j.Events = append(j.Events, eventJSON(ev))
		}
		return clicore.WriteJSON(e.Stdout, j)
	}
	return printTask(e.Stdout, t, events, time.Now())
}

// reconnecting reports a lost event stream of --follow --server.
func (e *env) reconnecting(err error, wait time.Duration) {
	fmt.Fprintf(e.Stderr, "drover: event stream from %s lost (%s); reconnecting in %s\n", e.serverURL,
		OneLine(e.remote.Err(err).Error()), wait.Round(time.Millisecond))
}

// printFollowed prints one event of --follow.
func (e *env) printFollowed(ev *drover.Event) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, eventJSON(ev))
	}
	_, err := fmt.Fprintln(e.Stdout, eventLine(ev))
	return err
}

// printEventList prints the events of "drover events".
func (e *env) printEventList(evs []*drover.Event) error {
	if e.JSON {
		for _, ev := range evs {
			if err := clicore.WriteJSON(e.Stdout, eventJSON(ev)); err != nil {
				return err
			}
		}
		return nil
	}
	return printEvents(e.Stdout, evs, true)
}

// sourceNote names where settings came from, for an error about them.
func sourceNote(from int) string {
	switch from {
	case fromEnv:
		return " (both set in the environment)"
	case fromFile:
		return " (both set in the config file)"
	}
	return ""
}

// readTokenFile reads --token-file, warning on stderr when other users of
// the machine may read it (a client's token file is not refused, unlike
// the server's: a secret mounted by an orchestrator is often 0644).
func (e *env) readTokenFile() ([]byte, error) {
	fh, err := os.Open(e.tokenFile)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	mode, open, err := openToOthers(fh)
	if err != nil {
		return nil, err
	}
	if open {
		fmt.Fprintf(e.Stderr, "drover: WARNING: --token-file %s is open to group or others (mode %04o): other users of this machine could use its token; chmod 600 it\n", e.tokenFile, mode)
	}
	return io.ReadAll(fh)
}
