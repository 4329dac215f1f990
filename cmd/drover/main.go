package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	// Schedules' time zones resolve without the system's zoneinfo (a
	// minimal container image may have none).
	_ "time/tzdata"

	"github.com/drover-run/drover/internal/cli"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel() // first signal: shut down cleanly
		<-sigs
		fmt.Fprintln(os.Stderr, "drover: second signal, exiting at once")
		os.Exit(130)
	}()
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}
