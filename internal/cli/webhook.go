package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/webhook"
)

func (e *env) webhookCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Help webhook receivers verify what the server sends",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(e.webhookSecretCmd())
	return cmd
}

func (e *env) webhookSecretCmd() *cobra.Command {
	var (
		secretFile string
		allowPerms bool
	)
	cmd := &cobra.Command{
		Use:   "secret URL",
		Short: "Print the Standard Webhooks secret (whsec_…) a receiver at URL verifies with",
		Long: `secret prints the secret a webhook receiver at URL configures in a Standard
Webhooks library (https://www.standardwebhooks.com, docs/webhooks.md):
whsec_ and the base64 of HMAC-SHA256(server secret, URL), the key that
signs every webhook sent to URL. Each URL has its own, so a receiver never
holds the server's secret, and a request sent to one receiver does not
verify at another.

URL is the callback URL of the tasks, or a --webhook-url of the server, as
given to drover (a #events=… part is left out, as the server does; a
trailing "/" matters). The server's secret comes from --webhook-secret-file
FILE, else $` + EnvWebhookSecret + `, as for "drover server". Nothing is
read from the database.`,
		Example: `  drover webhook secret https://app.example.com/hooks/drover --webhook-secret-file /etc/drover/webhook-secret
  DROVER_WEBHOOK_SECRET=… drover webhook secret 'https://ops.example.com/hook#events=alerts' --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sub, err := webhook.ParseSubscription(args[0])
			if err != nil {
				return clicore.Usage(err)
			}
			secret, err := e.webhookSecret(secretFile, allowPerms)
			if err != nil {
				return err
			}
			if secret == nil {
				return clicore.Usagef("no webhook secret: give --webhook-secret-file FILE or $%s, as to drover server", EnvWebhookSecret)
			}
			whsec := droverapi.WebhookSecret(secret, sub.URL)
			if e.JSON {
				return clicore.WriteJSON(e.Stdout, map[string]string{"url": sub.URL, "secret": whsec})
			}
			_, err = fmt.Fprintln(e.Stdout, whsec)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&secretFile, "webhook-secret-file", "", "file holding the server's webhook signing secret (default: $"+EnvWebhookSecret+")")
	f.BoolVar(&allowPerms, allowInsecurePermsFlag, false, "read --webhook-secret-file although it is open to group or others (a warning is printed)")
	return cmd
}
