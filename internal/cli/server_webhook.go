package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/internal/egress"
	"github.com/drover-run/drover/internal/webhook"
)

// EnvWebhookSecret names the variable holding the webhook signing secret
// when --webhook-secret-file is not given.
const EnvWebhookSecret = "DROVER_WEBHOOK_SECRET"

// webhookFlags are the server's webhook flags (docs/webhooks.md).
type webhookFlags struct {
	maxPerNS   int // --webhook-max-per-namespace
	urls       []string
	secretFile string
	prefixes   []string
	allow      *webhook.Allow         // parsed from prefixes by checkWebhookFlags, with the egress policy
	subs       []webhook.Subscription // parsed from urls by checkWebhookFlags
	egress     *egress.Policy         // the server's, set by checkWebhookFlags
}

func (f *webhookFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.urls, "webhook-url", nil, "send a signed webhook for every task that reaches a final state to this URL (repeatable); URL#events=LIST chooses the events instead: final, alerts, or event types (such as https://ops.example.com/hook#events=final,alerts); URL#namespace=NAME (joined to events= by &) sends a namespace's events instead of the default namespace's; tasks' own callback URLs are sent too")
	fl.IntVar(&f.maxPerNS, "webhook-max-per-namespace", 0, "webhook requests in flight for one namespace's events, once namespaces are in use, so one namespace's slow receivers leave the others room (0: three quarters of the dispatcher's concurrency)")
	fl.StringVar(&f.secretFile, "webhook-secret-file", "", "file holding the webhook signing secret (at least 16 bytes; default: $"+EnvWebhookSecret+"); with a secret the server sends webhooks")
	fl.StringArrayVar(&f.prefixes, "callback-url-prefix", nil, "allow tasks' callback URLs only under this prefix (repeatable; scheme, host and a path ending in \"/\", like https://hooks.example.com/): POST /v1/tasks refuses others with 400 and stored ones are not sent; default: any URL the egress policy allows (see --egress-allow)")
}

// checkWebhookFlags returns the signing secret (nil: webhooks off) after
// checking the flags; a --webhook-url the egress policy refuses is a usage
// error. The secret is never printed.
func (e *env) checkWebhookFlags(f *webhookFlags, outbound *egress.Policy, allowPerms bool) ([]byte, error) {
	secret, err := e.webhookSecret(f.secretFile, allowPerms)
	if err != nil {
		return nil, err
	}
	f.subs = nil
	for _, u := range f.urls {
		s, err := webhook.ParseSubscription(u)
		if err != nil {
			return nil, clicore.Usagef("--webhook-url %q: %v", u, err)
		}
		f.subs = append(f.subs, s)
	}
	allow, err := webhook.ParseAllow(f.prefixes)
	if err != nil {
		return nil, clicore.Usagef("--callback-url-prefix: %v", err)
	}
	f.allow, f.egress = allow.WithEgress(outbound), outbound
	if len(f.urls) > 0 && secret == nil {
		return nil, clicore.Usagef("--webhook-url needs a signing secret: --webhook-secret-file FILE or $%s", EnvWebhookSecret)
	}
	for i, sub := range f.subs {
		if pu, err := url.Parse(sub.URL); err == nil {
			if err := outbound.CheckURL(pu); err != nil {
				return nil, clicore.Usagef("--webhook-url %q: %v; open it with --egress-allow", f.urls[i], err)
			}
		}
	}
	return secret, nil
}

// webhookSecret returns the webhook signing secret of --webhook-secret-file
// file, else of $DROVER_WEBHOOK_SECRET; nil when neither is set.
func (e *env) webhookSecret(file string, allowPerms bool) ([]byte, error) {
	var secret []byte
	switch {
	case file != "":
		b, err := e.readSecretFile("--webhook-secret-file", file, allowPerms)
		if err != nil {
			return nil, err
		}
		secret = bytes.TrimSpace(b)
		if len(secret) == 0 {
			return nil, clicore.Usagef("--webhook-secret-file %s is empty", file)
		}
	case e.Getenv(EnvWebhookSecret) != "":
		secret = []byte(e.Getenv(EnvWebhookSecret))
	}
	if secret != nil && len(secret) < webhook.MinSecretBytes {
		return nil, clicore.Usagef("the webhook secret is %d bytes; it must be at least %d", len(secret), webhook.MinSecretBytes)
	}
	return secret, nil
}

// readSecretFile reads a file of secrets after checkSecretFile.
func (e *env) readSecretFile(flag, path string, allowPerms bool) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer fh.Close()
	if err := e.checkSecretFile(fh, flag, path, allowPerms); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return b, nil
}
