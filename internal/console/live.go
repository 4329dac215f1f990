package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/internal/httpapi"
)

// Live updates: the task page names a stream of server-sent events
// (data-live on <main>); static/live.js reloads the page when the stream
// says the task's history grew. The pages work without it.

// maxLiveStreams caps the live streams one console serves at once; past
// it a page is not updated live (its script gets 503 and gives up).
const maxLiveStreams = 64

// livePoll is how often a live stream reads the history: slower than a
// library subscriber's default, a person is watching.
const livePoll = 500 * time.Millisecond

// liveBeat is the interval of the comments that keep a quiet stream's
// connection open through proxies, and of the stream's checks that its
// session still holds (in nanoseconds: a test shortens it).
var liveBeat atomic.Int64

func init() { liveBeat.Store(int64(15 * time.Second)) }

// liveURL is the stream of a task page shown up to event after.
func liveURL(localID string, after int64) string {
	return "/tasks/" + url.PathEscape(localID) + "/live?after=" + strconv.FormatInt(after, 10)
}

// live streams an event "change" (id: the history's event ID) for every
// event of the task after ?after= (or the Last-Event-ID a reconnecting
// browser sends), until the browser leaves or the server shuts down.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	v, err := c.authenticate(w, r)
	var rl *httpapi.RateLimitedError
	var se *storeCheckError
	switch {
	case errors.As(err, &rl):
		w.Header().Set("Retry-After", rl.RetryAfterHeader())
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	case errors.As(err, &se):
		http.Error(w, "the server could not check the session; retry", c.statusOf(se.err))
		return
	case err != nil:
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	after, err := strconv.ParseInt(firstOf(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after"), "0"), 10, 64)
	if err != nil || after < 0 {
		http.Error(w, "after: want an event ID", http.StatusBadRequest)
		return
	}
	rctx, cancel := context.WithTimeout(r.Context(), c.opts.RequestTimeout)
	t, err := c.loadTask(rctx, r, v)
	cancel()
	if err != nil {
		http.Error(w, err.Error(), c.statusOf(err))
		return
	}
	select {
	case c.streams <- struct{}{}:
		defer func() { <-c.streams }()
	default:
		http.Error(w, "too many live pages open on this server", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(c.streamCtx, cancel)()
	rc := http.NewResponseController(w)
	// A stream outlives the server's write timeout; the beats and the
	// browser's going away end it. (Where it cannot be lifted the stream
	// ends at the timeout and the browser reconnects with Last-Event-ID.)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	evs := c.d.Subscribe(ctx, drover.Subscription{TaskID: t.ID, AfterID: after, PollInterval: livePoll})
	beat := time.NewTicker(time.Duration(liveBeat.Load()))
	defer beat.Stop()
	for {
		var err error
		select {
		case e, ok := <-evs:
			if !ok {
				return
			}
			_, err = fmt.Fprintf(w, "id: %d\nevent: change\ndata: %s\n\n", e.ID, e.Type)
		case <-beat.C:
			if c.sessionEnded(ctx, v.sess) {
				return
			}
			_, err = fmt.Fprint(w, ": still here\n\n")
		}
		if err != nil || rc.Flush() != nil {
			return
		}
	}
}

// sessionEnded reports whether the session of an open stream has ended
// since it opened: expired, or signed out (on any server). A failed read
// of the sign-outs does not end it. (Its token cannot have been removed
// meanwhile: the token list is fixed while the server runs.)
func (c *Console) sessionEnded(ctx context.Context, sess *session) bool {
	now := c.clock.Now()
	if !now.Before(time.Unix(sess.Expires, 0)) {
		return true
	}
	return !c.api.NoAuth() && errors.Is(c.checkSignedOut(ctx, sess, now), errSignedOut)
}

// CloseStreams ends the live streams (a server shutting down: they would
// otherwise hold it until its deadline).
func (c *Console) CloseStreams() { c.stopStreams() }
