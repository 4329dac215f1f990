package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clock"
	"github.com/drover-run/drover/internal/httpagent"
	"github.com/drover-run/drover/internal/httpapi"
	"github.com/drover-run/drover/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a Console.
type Options struct {
	// Client is the task client the pages read and act through.
	Client *drover.Client
	// Queues is the session-queue client (the overview counts queues).
	Queues *convoy.Client
	// Versions, when set, returns every stored version of the declarative
	// workflows (workflowdef.Registry.Versions); the Workflows page shows
	// them beside the workflows the client has registered.
	Versions func(ctx context.Context) ([]drover.Workflow, error)
	// API authenticates tokens exactly as the HTTP API does.
	API *httpapi.Handler
	// HTTPHosts, when set, reports the hosts the built-in http agent
	// calls (workflowdef.Registry.HTTPHosts), for the Agents page.
	HTTPHosts func() []httpagent.HostHealth
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Clock defaults to the system clock.
	Clock clock.Clock
	// RequestTimeout bounds the store work of one page. Default 30s.
	RequestTimeout time.Duration
}

// Console is the operator console's http.Handler.
type Console struct {
	opts   Options
	d      *drover.Client
	api    *httpapi.Handler
	log    *slog.Logger
	clock  clock.Clock
	seal   *sealer
	pages  map[string]*template.Template
	mux    *http.ServeMux
	static http.Handler
	counts countCache
	// stateCounts are the overview's counts by state.
	stateCounts refreshed[map[dt.ProcessState]int]

	streams     chan struct{} // a slot per live stream
	streamCtx   context.Context
	stopStreams context.CancelFunc
}

// New returns the console over opts.Client, authenticating with opts.API.
func New(opts Options) (*Console, error) {
	if opts.Client == nil || opts.Queues == nil || opts.API == nil {
		return nil, errors.New("console: Options.Client, Options.Queues and Options.API are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	seal, err := newSealer(opts.API.SessionKey())
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c := &Console{opts: opts, d: opts.Client, api: opts.API, log: opts.Logger, clock: opts.Clock, seal: seal,
		pages: map[string]*template.Template{}, mux: http.NewServeMux(), streams: make(chan struct{}, maxLiveStreams)}
	c.streamCtx, c.stopStreams = context.WithCancel(context.Background())
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		c.pages[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	sub, _ := fs.Sub(staticFS, "static")
	c.static = http.StripPrefix("/static/", http.FileServerFS(sub))

	c.mux.HandleFunc("GET /signin", c.signinForm)
	c.mux.HandleFunc("POST /signin", c.signin)
	c.mux.HandleFunc("POST /signout", c.signout)
	c.mux.HandleFunc("POST /namespace", c.switchNamespace)
	c.mux.HandleFunc("GET /static/", c.static.ServeHTTP)
	c.mux.Handle("GET /{$}", c.page(c.overview))
	c.mux.Handle("GET /tasks", c.page(c.tasks))
	c.mux.Handle("GET /tasks/{id}", c.page(c.task))
	c.mux.HandleFunc("GET /tasks/{id}/live", c.live)
	c.mux.Handle("GET /tasks/{id}/resubmit", c.page(c.confirmResubmit))
	c.mux.Handle("POST /tasks/{id}/resubmit", c.action(c.resubmit))
	c.mux.Handle("GET /tasks/{id}/cancel", c.page(c.confirmCancel))
	c.mux.Handle("POST /tasks/{id}/cancel", c.action(c.cancel))
	c.mux.Handle("POST /tasks/{id}/signal", c.action(c.signal))
	c.mux.Handle("GET /alerts", c.page(c.alerts))
	c.mux.Handle("POST /alerts/{id}/ack", c.action(c.ack))
	c.mux.Handle("POST /alerts/ack", c.action(c.ackMany))
	c.mux.Handle("GET /workflows", c.page(c.workflows))
	c.mux.Handle("GET /agents", c.page(c.agents))
	c.mux.Handle("GET /schedules", c.page(c.schedules))
	c.mux.Handle("GET /schedules/{name}/delete", c.page(c.confirmScheduleDelete))
	c.mux.Handle("POST /schedules/{name}/{action}", c.action(c.scheduleAction))
	c.mux.Handle("GET /queues", c.page(c.queues))
	c.mux.Handle("GET /queues/{queue}", c.page(c.queue))
	c.mux.Handle("GET /queues/{queue}/sessions/{session}", c.page(c.session))
	c.mux.Handle("GET /queues/{queue}/sessions/{session}/deadletters/{seq}/{action}", c.page(c.confirmDead))
	c.mux.Handle("POST /queues/{queue}/sessions/{session}/deadletters/{seq}/{action}", c.action(c.resolveDead))
	c.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, http.StatusNotFound, "No page here.")
	})
	return c, nil
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	if err := c.api.CheckBrowser(r); err != nil {
		c.fail(w, r, nil, http.StatusForbidden, err.Error())
		return
	}
	if r.Method == http.MethodPost && !sameOriginPost(r) {
		c.fail(w, r, nil, http.StatusForbidden, "Cross-origin form refused.")
		return
	}
	c.mux.ServeHTTP(w, r)
}

// sameOriginPost reports whether a POST's Origin, when sent, is the
// request's own (a second guard beside the CSRF token).
func sameOriginPost(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// viewer is the signed-in caller of a request.
type viewer struct {
	sess *session
	id   *httpapi.Identity
	csrf string
	// choices are the namespaces the picker offers a global viewer
	// (default, and those of the configured tokens).
	choices []string
}

// authenticate returns the request's viewer, or nil and a reason the
// caller must sign in. Without auth a missing session is issued.
func (c *Console) authenticate(w http.ResponseWriter, r *http.Request) (*viewer, error) {
	now := c.clock.Now()
	var sess *session
	if ck, err := r.Cookie(cookieName); err == nil {
		sess, err = c.seal.open(ck.Value, now)
		if err != nil && !c.api.NoAuth() {
			return nil, err
		}
	}
	if c.api.NoAuth() {
		if sess == nil {
			var err error
			if sess, err = newSession("", now); err != nil {
				return nil, err
			}
			v, err := c.seal.seal(sess)
			if err != nil {
				return nil, err
			}
			setCookie(w, r, v, int(SessionTTL/time.Second))
		}
		id := c.api.Anonymous()
		if err := c.api.Allow(id); err != nil {
			return nil, err
		}
		return c.viewerIn(sess, id), nil
	}
	if sess == nil {
		return nil, errNoSession
	}
	id, err := c.api.Authenticate(r, sess.Secret)
	if err != nil {
		return nil, err
	}
	if !id.CanRead() {
		return nil, errors.New("this token may not read tasks (it needs the submit or operator scope)")
	}
	// After the token check (an unknown token costs the store nothing),
	// before the rate limit (a signed-out copy uses none of the token's).
	if err := c.checkSignedOut(r.Context(), sess, now); err != nil {
		return nil, err
	}
	if err := c.api.Allow(id); err != nil {
		return nil, err
	}
	return c.viewerIn(sess, id), nil
}

// viewerIn is the viewer of sess with identity id, in the namespace the
// session chose (a namespace's token stays in its own).
func (c *Console) viewerIn(sess *session, id *httpapi.Identity) *viewer {
	if sess.NS != "" {
		if in, err := id.In(sess.NS); err == nil {
			id = in
		}
	}
	return &viewer{sess: sess, id: id, csrf: c.seal.csrf(sess), choices: append([]string{dt.DefaultNamespace}, c.api.TokenNamespaces()...)}
}

// switchNamespace serves POST /namespace: a global token's session
// chooses the namespace its pages show (as the API's Drover-Namespace
// header does). It changes no stored state, so the read-only may too,
// with the session's CSRF token.
func (c *Console) switchNamespace(w http.ResponseWriter, r *http.Request) {
	v, err := c.authenticate(w, r)
	if err != nil {
		c.refuse(w, r, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if !c.seal.checkCSRF(v.sess, r.PostFormValue("csrf")) {
		c.fail(w, r, v, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
		return
	}
	ns := strings.TrimSpace(r.PostFormValue("ns"))
	if ns == "" {
		ns = dt.DefaultNamespace
	}
	if _, err := v.id.In(ns); err != nil {
		c.fail(w, r, v, http.StatusBadRequest, "Cannot switch namespace: "+err.Error())
		return
	}
	sess := *v.sess
	sess.NS = ns
	sealed, err := c.seal.seal(&sess)
	if err != nil {
		c.fail(w, r, v, http.StatusInternalServerError, err.Error())
		return
	}
	setCookie(w, r, sealed, int(time.Unix(sess.Expires, 0).Sub(c.clock.Now())/time.Second))
	http.Redirect(w, r, "/?done="+url.QueryEscape("Now showing the namespace "+ns+"."), http.StatusSeeOther)
}

// pageData is what every template gets.
type pageData struct {
	Title    string
	Nav      string
	Viewer   *viewer
	NoAuth   bool
	Flash    string
	Error    string
	Status   int
	Data     any
	Now      time.Time
	SignedIn bool
	// Live is the URL of the page's live stream ("": none).
	Live string
}

// Operator reports whether the viewer may act.
func (p *pageData) Operator() bool { return p.Viewer != nil && p.Viewer.id.Operator() }

// CSRF is the viewer's CSRF token.
func (p *pageData) CSRF() string {
	if p.Viewer == nil {
		return ""
	}
	return p.Viewer.csrf
}

// Who names the viewer.
// Namespace is the namespace the pages show, as a user writes it.
func (p *pageData) Namespace() string {
	if p.Viewer == nil {
		return ""
	}
	return p.Viewer.id.ListNamespace()
}

// PicksNamespace reports whether the viewer may choose the namespace (a
// global token, or no auth); a namespace's token sees its own only.
func (p *pageData) PicksNamespace() bool { return p.Viewer != nil && !p.Viewer.id.Confined() }

// Namespaces are the namespaces the picker suggests.
func (p *pageData) Namespaces() []string {
	if p.Viewer == nil {
		return nil
	}
	return p.Viewer.choices
}

func (p *pageData) Who() string {
	if p.Viewer == nil {
		return ""
	}
	if n := p.Viewer.id.Name(); n != "" {
		return n
	}
	return "no auth (loopback)"
}

// pageFunc renders a page: it returns the template, its title and data.
type pageFunc func(ctx context.Context, r *http.Request, v *viewer) (tmpl, title string, data any, err error)

// page wraps a GET page: the session, the store timeout, rendering.
func (c *Console) page(fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := c.authenticate(w, r)
		if err != nil {
			c.toSignin(w, r, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), c.opts.RequestTimeout)
		defer cancel()
		tmpl, title, data, err := fn(ctx, r, v)
		if err != nil {
			c.fail(w, r, v, c.statusOf(err), err.Error())
			return
		}
		p := &pageData{Title: title, Viewer: v, Data: data, Flash: r.URL.Query().Get("done")}
		if l, ok := data.(interface{ live() string }); ok {
			p.Live = l.live()
		}
		c.render(w, r, http.StatusOK, tmpl, p)
	})
}

// actionFunc performs a POST action and returns where to go next and a
// sentence saying what was done.
type actionFunc func(ctx context.Context, r *http.Request, v *viewer) (next, done string, err error)

// action wraps a state-changing POST: a valid session, the operator
// scope and the session's CSRF token, in that order; nothing is done
// unless all hold.
func (c *Console) action(fn actionFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := c.authenticate(w, r)
		if err != nil {
			c.refuse(w, r, err)
			return
		}
		if !v.id.Operator() {
			c.fail(w, r, v, http.StatusForbidden, "This token is read-only: actions need a token with the operator scope.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !c.seal.checkCSRF(v.sess, r.PostFormValue("csrf")) {
			c.fail(w, r, v, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), c.opts.RequestTimeout)
		defer cancel()
		next, done, err := fn(ctx, r, v)
		if err != nil {
			c.fail(w, r, v, c.statusOf(err), err.Error())
			return
		}
		http.Redirect(w, r, next+"?done="+url.QueryEscape(done), http.StatusSeeOther)
	})
}

func (c *Console) signinForm(w http.ResponseWriter, r *http.Request) {
	if c.api.NoAuth() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "signin", &pageData{Title: "Sign in", Error: r.URL.Query().Get("why")})
}

func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	if c.api.NoAuth() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	secret := strings.TrimSpace(r.PostFormValue("token"))
	id, err := c.api.Authenticate(r, secret)
	var rl *httpapi.RateLimitedError
	switch {
	case errors.As(err, &rl):
		c.render(w, r, http.StatusTooManyRequests, "signin", &pageData{Title: "Sign in", Error: err.Error()})
		return
	case err != nil:
		c.render(w, r, http.StatusUnauthorized, "signin", &pageData{Title: "Sign in", Error: "Unknown token."})
		return
	case !id.CanRead():
		c.render(w, r, http.StatusForbidden, "signin", &pageData{Title: "Sign in", Error: "This token may not read tasks: the console needs a token with the submit or operator scope."})
		return
	}
	sess, err := newSession(secret, c.clock.Now())
	if err == nil {
		var v string
		if v, err = c.seal.seal(sess); err == nil {
			setCookie(w, r, v, int(SessionTTL/time.Second))
		}
	}
	if err != nil {
		c.fail(w, r, nil, http.StatusInternalServerError, err.Error())
		return
	}
	c.log.Info("console: signed in", "actor", id.Actor())
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// signout serves POST /signout: the session is recorded as signed out in
// the store, so that no server accepts a copy of its cookie any more, and
// the browser's cookie is deleted.
// It needs only a cookie that opens and the session's CSRF token, not a
// token still accepted or room under the rate limit: a sign-out that
// cannot be recorded says so and keeps the cookie, never pretends. One
// recorded already writes nothing again.
func (c *Console) signout(w http.ResponseWriter, r *http.Request) {
	var sess *session
	if ck, err := r.Cookie(cookieName); err == nil {
		sess, _ = c.seal.open(ck.Value, c.clock.Now())
	}
	if sess != nil && !c.seal.checkCSRF(sess, r.PostFormValue("csrf")) {
		c.fail(w, r, nil, http.StatusForbidden, "The form's CSRF token is missing or wrong.")
		return
	}
	if sess != nil && !c.api.NoAuth() {
		err := c.checkSignedOut(r.Context(), sess, c.clock.Now())
		if err == nil {
			err = c.recordSignOut(r.Context(), sess)
			if err == nil {
				c.log.Info("console: a session signed out")
			}
		}
		if err != nil && !errors.Is(err, errSignedOut) { // signed out already: nothing to write
			c.log.Error("console: a sign-out could not be recorded", "err", err)
			c.render(w, r, http.StatusServiceUnavailable, "error", &pageData{Title: "Not signed out", Status: http.StatusServiceUnavailable,
				Error: "Not signed out: the server could not record the sign-out (see its log). Retry in a moment."})
			return
		}
	}
	setCookie(w, r, "", -1)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// refuse answers a request whose session authenticate refused: 429 over
// the rate limit, the store's error when the sign-out check failed, else
// 401.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if !c.notAboutSignIn(w, r, err) {
		c.fail(w, r, nil, http.StatusUnauthorized, "Sign in first: "+err.Error())
	}
}

// notAboutSignIn answers a refusal of authenticate that signing in again
// would not cure, and reports whether it did: the rate limit (429) or a
// failed sign-out check (the store's error).
func (c *Console) notAboutSignIn(w http.ResponseWriter, r *http.Request, err error) bool {
	var se *storeCheckError
	switch {
	case c.rateLimited(w, r, err):
	case errors.As(err, &se):
		c.fail(w, r, nil, c.statusOf(se.err), se.err.Error())
	default:
		return false
	}
	return true
}

// signOutMargin is how long a sign-out is kept past its session's expiry.
const signOutMargin = time.Hour

// maxExpiredSignOuts is how many expired sign-outs a sign-out deletes:
// more than one, so that they never pile up.
const maxExpiredSignOuts = 100

// recordSignOut records sess as signed out until it expires, and deletes
// sign-outs that have expired.
func (c *Console) recordSignOut(ctx context.Context, sess *session) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	now := c.clock.Now()
	return c.d.Store().InTx(ctx, func(ctx context.Context, x store.Executor) error {
		if err := x.SignOutInsert(ctx, &store.SignOutInsertParams{SessionID: sess.ID, ExpiresAt: time.Unix(sess.Expires, 0)}); err != nil {
			return err
		}
		// A margin for the other servers' clocks: one running behind still
		// opens the cookie a little after this one would.
		_, err := x.SignOutDeleteExpired(ctx, &store.SignOutDeleteExpiredParams{Before: now.Add(-signOutMargin), Limit: maxExpiredSignOuts})
		return err
	})
}

// errSignedOut: the session's cookie is a copy of one signed out.
var errSignedOut = errors.New("this session was signed out")

// storeCheckError is a failure to read whether a session was signed out:
// the page answers it as a store error, not as a request to sign in.
type storeCheckError struct{ err error }

func (e *storeCheckError) Error() string { return e.err.Error() }
func (e *storeCheckError) Unwrap() error { return e.err }

// checkSignedOut refuses a session signed out before it expires
// (errSignedOut).
func (c *Console) checkSignedOut(ctx context.Context, sess *session, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	out, err := c.d.Store().Reader().SignOutExists(ctx, &store.SignOutExistsParams{SessionID: sess.ID, Now: now})
	switch {
	case err != nil:
		return &storeCheckError{err}
	case out:
		return errSignedOut
	}
	return nil
}

// rateLimited answers 429 with Retry-After when err is a rate limit's
// refusal, and reports whether it did.
func (c *Console) rateLimited(w http.ResponseWriter, r *http.Request, err error) bool {
	var rl *httpapi.RateLimitedError
	if !errors.As(err, &rl) {
		return false
	}
	w.Header().Set("Retry-After", rl.RetryAfterHeader())
	c.fail(w, r, nil, http.StatusTooManyRequests, err.Error())
	return true
}

// toSignin sends a caller without a valid session to the sign-in page.
func (c *Console) toSignin(w http.ResponseWriter, r *http.Request, why error) {
	msg := ""
	if !errors.Is(why, errNoSession) || strings.Contains(why.Error(), "expired") {
		msg = why.Error()
	}
	if c.notAboutSignIn(w, r, why) {
		return
	}
	switch {
	case errors.Is(why, httpapi.ErrUnknownToken):
		setCookie(w, r, "", -1)
		msg = "The token of this session is no longer accepted."
	case errors.Is(why, errSignedOut):
		setCookie(w, r, "", -1)
		msg = "This session was signed out. Sign in again."
	}
	target := "/signin"
	if msg != "" {
		target += "?why=" + url.QueryEscape(msg)
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// statusOf is the status the API answers err with.
func (c *Console) statusOf(err error) int { return c.api.Status(err) }

// fail renders an error page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, v *viewer, status int, msg string) {
	if status >= 500 {
		// The page says no more than the API would: details go to the log.
		c.log.Error("console: request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", msg)
		msg = "The server could not answer this page (see its log); retry in a moment."
	}
	c.render(w, r, status, "error", &pageData{Title: http.StatusText(status), Viewer: v, Error: msg, Status: status})
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p *pageData) {
	p.NoAuth = c.api.NoAuth()
	p.SignedIn = p.Viewer != nil
	p.Now = c.clock.Now()
	if p.Nav == "" {
		p.Nav = name
	}
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, p); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
