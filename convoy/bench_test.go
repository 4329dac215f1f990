package convoy_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/testutil"
	"github.com/drover-run/drover/store"
	"github.com/drover-run/drover/store/sqlite"
)

// BenchmarkProcessor measures processors draining 1,000 sessions with a
// backlog (b.N messages in all, published before the clock starts) with a
// handler that does nothing, on SQLite (synchronous full and normal) and
// PostgreSQL:
//
//	DROVER_TEST_DATABASE_URL=... go test -run '^$' -bench Processor -benchtime 50000x ./convoy/
func BenchmarkProcessor(b *testing.B) {
	for _, drv := range []string{"sqlite", "sqlite-normal", "postgres"} {
		for _, cfg := range [][2]int{{1, 64}, {1, 256}, {1, 1000}, {2, 256}, {4, 256}} {
			procs, maxSessions := cfg[0], cfg[1]
			b.Run(fmt.Sprintf("%s/procs%d/max%d", drv, procs, maxSessions), func(b *testing.B) {
				var d store.Driver
				switch drv {
				case "sqlite":
					d = testutil.SQLite(b)
				case "sqlite-normal":
					sd, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "d.db"), sqlite.Options{Create: true, Synchronous: "normal"})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { sd.Close() })
					if err := sd.Migrate(context.Background()); err != nil {
						b.Fatal(err)
					}
					d = sd
				default:
					d = testutil.Postgres(b)
				}
				benchProcessor(b, d, procs, maxSessions)
			})
		}
	}
}

func benchProcessor(b *testing.B, d store.Driver, procs, maxSessions int) {
	const sessions = 1000
	c, err := convoy.New(convoy.Config{Store: d})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	batch := make([]convoy.Message, 0, 1000)
	for i := range b.N {
		s := fmt.Sprintf("s%04d", i%sessions)
		batch = append(batch, convoy.Message{SessionID: s, Body: []byte(`{"amount":1}`)})
		if len(batch) == cap(batch) || i == b.N-1 {
			if _, err := c.Publish(ctx, "bench", batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	var n atomic.Int64
	done := make(chan struct{})
	var ps []*convoy.Processor
	for range procs {
		p, err := convoy.NewProcessor(c, "bench", func(ctx context.Context, m *convoy.ReceivedMessage) error {
			if n.Add(1) == int64(b.N) {
				close(done)
			}
			return nil
		}, convoy.ProcessorOptions{MaxSessions: maxSessions})
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, p)
	}
	b.ResetTimer()
	start := time.Now()
	for _, p := range ps {
		if err := p.Start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	el := time.Since(start)
	b.StopTimer()
	var st convoy.ProcessorStats
	for _, p := range ps {
		if err := p.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		st.Rounds += p.Stats().Rounds
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(st.Rounds), "rounds")
}
