package cli

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/clicore"
)

// DefaultHealthURL is where "drover healthcheck" looks without --url: the
// liveness endpoint of a server started with --listen 0.0.0.0:8080, as in
// the container image.
const DefaultHealthURL = "http://127.0.0.1:8080/healthz"

func (e *env) healthcheckCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Check that a drover server answers its health endpoint (for container health checks)",
		Long: `healthcheck sends GET --url (default ` + DefaultHealthURL + `) and exits 0
if the answer is 2xx within --timeout, else 1 with the reason on stderr. It
is the container image's HEALTHCHECK, which has no curl: point it at
/healthz (the process runs) or /readyz (the process and its database
answer). It needs no token and does not read the database.`,
		Example: `  drover healthcheck
  drover healthcheck --url http://127.0.0.1:8080/readyz --timeout 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return clicore.Usagef("--timeout must be positive, got %s", timeout)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return clicore.Usagef("--url: %w", err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("health check: %w", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("health check: GET %s answered %s", url, resp.Status)
			}
			if e.JSON {
				return clicore.WriteJSON(e.Stdout, map[string]any{"url": url, "status": resp.StatusCode})
			}
			_, err = fmt.Fprintf(e.Stdout, "ok: GET %s answered %s\n", url, resp.Status)
			return err
		},
	}
	cmd.Flags().StringVar(&url, "url", DefaultHealthURL, "the URL to GET")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
