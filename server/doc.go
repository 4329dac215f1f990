// Package server assembles a drover server: the roles of a drover.Client
// (scheduler, agents, supervisor), declarative workflows loaded from a
// directory and reloaded on change, the HTTP API with its tokens, limits and
// TLS, Prometheus metrics, and the webhook dispatcher, started and stopped
// together.
//
// "drover server" is this package with its Config filled from flags; a Go
// program embeds the same server by filling Config itself and calling
// Run, which returns when ctx ends and everything has stopped:
//
//	drv, _ := sqlite.Open(ctx, "drover.db", sqlite.Options{Create: true})
//	_ = drv.Migrate(ctx)
//	err := server.Run(ctx, server.Config{
//		Store: drv,
//		HTTP:  &server.HTTPConfig{Listen: "127.0.0.1:8080", Tokens: tokens},
//	})
//
// Workflows and agents written in Go run beside the declarative ones
// through Config.Workflows and Config.Agents ("drover server --demo" passes
// the orders demo's this way).
package server
