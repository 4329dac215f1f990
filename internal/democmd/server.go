package democmd

import (
	"context"
	"fmt"
	"time"

	"github.com/drover-run/drover/internal/orders"
	"github.com/drover-run/drover/internal/remotesim"
	"github.com/drover-run/drover/server"
)

// demoProvider names the orders demo's agents in messages.
const demoProvider = "the orders demo (--demo)"

// AddToServer adds the orders demo to cfg: its workflow and its agents, which
// call remoteURL or, with the agent role and no URL, an embedded simulated
// service with no faults that it starts (its URL is logged as remote_url
// when the server has started). The returned function stops that service.
func AddToServer(ctx context.Context, cfg *server.Config, remoteURL string, opts orders.Options) (func(), error) {
	stop := func() {}
	if cfg.Roles.Agent && remoteURL == "" {
		svc := remotesim.New(remotesim.Config{Seed: time.Now().UnixNano()})
		url, stopSvc, err := svc.Serve(context.WithoutCancel(ctx), "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("start the demo's embedded remote service: %w", err)
		}
		stop, remoteURL = stopSvc, url
	}
	cfg.Workflows = append(cfg.Workflows, orders.Workflow(opts))
	cfg.Agents = append(cfg.Agents, orders.Agents(remoteURL, opts)...)
	cfg.AgentsProvider = demoProvider
	cfg.StartedLog = append(cfg.StartedLog, "demo", true, "remote_url", remoteURL)
	return stop, nil
}
