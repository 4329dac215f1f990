package democmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/remotesim"
)

// ServiceReady starts the line "drover demo service" prints once it
// listens; tests and scripts wait for it.
const ServiceReady = "demo service listening on "

func (e *env) demoServiceCmd() *cobra.Command {
	var (
		listen      string
		transient   float64
		hang        float64
		permanent   float64
		rejectAbove int64
		latency     time.Duration
		seed        int64
	)
	cmd := &cobra.Command{
		Use:   "service",
		Short: "Serve a simulated flaky remote service for workflows to call",
		Long: `demo service serves the simulated remote service of "demo orders" in the
foreground until interrupted, for trying declarative workflows and the
built-in HTTP agent (docs/server.md).

It answers POST /v1/OPERATION (OPERATION: lower-case letters and "-", for
example reserve-stock or charge-card) with a JSON body {"order_id": "…",
"amount": N} and an Idempotency-Key header. A success is 200 with
{"operation","order_id","confirmation","deduplicated"}; a key seen before
gets the same answer again without applying the effect twice. Faults:
--transient-rate (503), --hang-rate (never answers; half of them after
applying the effect), --permanent-rate (422, sticky per key), and
--reject-amount-above N (422 for every amount over N, e.g. a card limit).

Once listening it prints "` + ServiceReady + `http://HOST:PORT" on stderr.
On exit it prints what it saw (calls, effects applied, deduplicated calls,
duplicate effects) on stdout; --json as one JSON object.`,
		Example: `  drover demo service --listen 127.0.0.1:9001
  drover demo service --listen 127.0.0.1:9002 --transient-rate 0.3 --reject-amount-above 1000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for name, r := range map[string]float64{"--transient-rate": transient, "--hang-rate": hang, "--permanent-rate": permanent} {
				if r < 0 || r > 1 {
					return clicore.Usagef("%s must be between 0 and 1, got %g", name, r)
				}
			}
			if transient+hang+permanent > 1 {
				return clicore.Usagef("--transient-rate + --hang-rate + --permanent-rate must not exceed 1, got %g", transient+hang+permanent)
			}
			if rejectAbove < 0 || latency < 0 {
				return clicore.Usagef("--reject-amount-above and --latency must not be negative")
			}
			if !cmd.Flags().Changed("seed") {
				seed = time.Now().UnixNano()
			}
			svc := remotesim.New(remotesim.Config{TransientRate: transient, HangRate: hang, PermanentRate: permanent,
				RejectAmountAbove: rejectAbove, Latency: latency, Seed: seed})
			ctx := cmd.Context()
			url, stop, err := svc.Serve(ctx, listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			fmt.Fprintln(e.Stderr, ServiceReady+url)
			<-ctx.Done()
			stop()
			st := svc.Stats()
			if e.JSON {
				return clicore.WriteJSON(e.Stdout, st)
			}
			fmt.Fprintf(e.Stdout, "calls %d, applied %d, deduplicated %d, duplicate effects %d, transient %d, permanent %d, hangs %d, bad requests %d\n",
				st.Calls, st.Applied, st.DeduplicatedCalls, st.DuplicateEffects, st.Transient, st.Permanent, st.Hangs, st.BadRequests)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:9001", "address to listen on (host:port; :0 picks a free port)")
	f.Float64Var(&transient, "transient-rate", 0, "probability a call fails with 503 before applying anything")
	f.Float64Var(&hang, "hang-rate", 0, "probability a call never answers")
	f.Float64Var(&permanent, "permanent-rate", 0, "probability a call fails with 422 (sticky per idempotency key)")
	f.Int64Var(&rejectAbove, "reject-amount-above", 0, "fail every call whose amount is larger with 422 (0: off)")
	f.DurationVar(&latency, "latency", 0, "fixed service time of every call")
	f.Int64Var(&seed, "seed", 0, "seed of the fault sequence (default: random)")
	return cmd
}
