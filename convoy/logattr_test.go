package convoy_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
)

// TestLogLinesCarryMessageIDs checks that the log line of a message's
// handler names the message: its queue, session and sequence number.
func TestLogLinesCarryMessageIDs(t *testing.T) {
	drivers(t, func(t *testing.T, d store.Driver) {
		var buf testutil.Buffer
		c, err := convoy.New(convoy.Config{Store: d, PollInterval: 10 * time.Millisecond,
			Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		handler := func(ctx context.Context, m *convoy.ReceivedMessage) error {
			if m.Seq == 2 {
				panic("the handler's bug")
			}
			return nil
		}
		p := must[*convoy.Processor](t)(convoy.NewProcessor(c, "logq", handler, convoy.ProcessorOptions{}))
		startProcessor(t, p)
		publish(t, c, "logq", msgs("order-7", 2)...)
		waitFor(t, "the handler's panic logged", func() bool { return strings.Contains(buf.String(), "handler panicked") })
		for _, line := range strings.Split(buf.String(), "\n") {
			if !strings.Contains(line, "handler panicked") {
				continue
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
			if rec["queue"] != "logq" || rec["session"] != "order-7" || rec["seq"] != 2.0 {
				t.Errorf("log line without the message's IDs: %s", line)
			}
		}
	})
}
