package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/server"
	"github.com/drover-run/drover/store/sqlite"
)

// A Go program embeds the server: its store, a workflow and an agent
// written in Go, and the HTTP API, which a client then calls.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "drover-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drv, err := sqlite.Open(ctx, filepath.Join(dir, "drover.db"), sqlite.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer drv.Close()
	if err := drv.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	const token = "example-token-0123456789abcdef"
	ready := make(chan server.Ready, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Config{
			Store:  drv,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Workflows: []drover.Workflow{{Name: "greet", Steps: []drover.Step{
				{Name: "hello", Agent: "greeter"},
			}}},
			Agents: []drover.Agent{{Name: "greeter", Func: func(ctx context.Context, req *drover.AgentRequest) ([]byte, error) {
				return []byte(`{"greeting":"hello"}`), nil
			}}},
			HTTP:    &server.HTTPConfig{Listen: "127.0.0.1:0", Tokens: []server.Token{{Secret: token, Scopes: []server.Scope{server.ScopeSubmit}}}},
			OnReady: func(r server.Ready) { ready <- r },
		})
	}()
	var r server.Ready
	select {
	case r = <-ready:
	case err := <-done:
		log.Fatal(err)
	}

	call := func(method, path, body string) map[string]any {
		req, _ := http.NewRequest(method, r.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			log.Fatal(err)
		}
		return m
	}
	call("POST", "/v1/tasks", `{"workflow":"greet","id":"t-1","input":{}}`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		task := call("GET", "/v1/tasks/t-1", "")
		if task["state"] == "Processed" {
			fmt.Println(task["state"], task["output"])
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("task t-1 is %v after 30s", task["state"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: Processed map[greeting:hello]
}
