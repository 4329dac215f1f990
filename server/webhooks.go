package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/instrument"
	"github.com/drover-run/drover/internal/tracing"
	"github.com/drover-run/drover/internal/webhook"
)

// MinWebhookSecretBytes is the shortest webhook secret accepted.
const MinWebhookSecretBytes = webhook.MinSecretBytes

// checkWebhooks parses Config.Webhooks: the subscriptions of its URLs
// (each allowed by the egress policy) and the callback URL prefixes.
func (s *Server) checkWebhooks() error {
	w := s.cfg.Webhooks
	if w.Secret != nil && len(w.Secret) < webhook.MinSecretBytes {
		return fmt.Errorf("server: Config.Webhooks.Secret is %d bytes; it must be at least %d", len(w.Secret), webhook.MinSecretBytes)
	}
	if len(w.URLs) > 0 && w.Secret == nil {
		return errors.New("server: Config.Webhooks.URLs need a Secret")
	}
	for _, u := range w.URLs {
		sub, err := webhook.ParseSubscription(u)
		if err != nil {
			return fmt.Errorf("server: Config.Webhooks.URLs %q: %w", u, err)
		}
		if pu, err := url.Parse(sub.URL); err == nil {
			if err := s.outbound.CheckURL(pu); err != nil {
				return fmt.Errorf("server: Config.Webhooks.URLs %q: %w; open it with Config.EgressAllow", u, err)
			}
		}
		s.subs = append(s.subs, sub)
	}
	allow, err := webhook.ParseAllow(w.CallbackURLPrefixes)
	if err != nil {
		return fmt.Errorf("server: Config.Webhooks.CallbackURLPrefixes: %w", err)
	}
	s.allow = allow.WithEgress(s.outbound)
	return nil
}

// startWebhooks runs the webhook dispatcher until the returned stop is
// called; stop waits for deliveries in flight (within their timeout).
// Without a secret it does nothing and returns no dispatcher.
func (s *Server) startWebhooks(ctx context.Context, c *drover.Client) (d *webhook.Dispatcher, stop func(), err error) {
	log, secret := s.log, s.cfg.Webhooks.Secret
	if secret == nil {
		log.Info("webhooks off: tasks' callback URLs are kept and sent by a server run with a webhook secret")
		return nil, func() {}, nil
	}
	d, err = webhook.New(c.Store(), webhook.Options{Secret: secret, Subscriptions: s.subs, AllowCallbacks: s.allow, Egress: s.outbound,
		Instance: c.InstanceID(), Logger: log, MaxPerNamespace: s.cfg.Webhooks.MaxPerNamespace, Recorder: instrument.ClientRecorder(c),
		Tracer: tracing.New(s.cfg.TracerProvider)})
	if err != nil {
		return nil, nil, fmt.Errorf("webhooks: %w", err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(wctx); err != nil {
			log.Error("webhook dispatcher stopped", "err", err)
		}
	}()
	log.Info("webhooks on", "urls", len(s.cfg.Webhooks.URLs), "callbacks_allowed", s.allow.String())
	return d, func() { cancel(); <-done }, nil
}
