package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverapi"
	"github.com/drover-run/drover/droverclient"
	"github.com/drover-run/drover/internal/clicore"
	"github.com/drover-run/drover/store"
)

// Queues is where the queue commands read and change session queues: the
// store through a convoy.Client, or a server's HTTP API. Errors come back
// explained for the user; a queue or session the command names must exist.
type Queues interface {
	// Publish publishes one message.
	Publish(ctx context.Context, queue string, m convoy.Message) (convoy.Published, error)
	// Peek is the session and one page of its messages from seq from,
	// with the seq to start the next page at (0: none).
	Peek(ctx context.Context, queue, session string, from int64, limit int) (*convoy.Session, []*convoy.StoredMessage, int64, error)
	// Sessions is one page of a queue's sessions and the ID to pass as
	// after for the next ("": none).
	Sessions(ctx context.Context, queue, after string, limit int) ([]*convoy.Session, string, error)
	Queues(ctx context.Context) ([]*convoy.Queue, error)
	// Policy is a queue's policy; SetPolicy changes what ch sets, creating
	// the queue if needed (created).
	Policy(ctx context.Context, queue string) (*convoy.Queue, error)
	SetPolicy(ctx context.Context, queue string, ch PolicyChange) (q *convoy.Queue, created bool, err error)
	// DeadLetters is one page of dead letters (of one session, or all) and
	// the cursor of the next (nil: none).
	DeadLetters(ctx context.Context, queue, session string, after convoy.DeadLetterCursor, limit int) ([]*convoy.StoredMessage, *convoy.DeadLetterCursor, error)
	// Resolve resubmits or discards a dead letter and returns its session.
	Resolve(ctx context.Context, queue, session string, seq int64, resubmit bool) (*convoy.Session, error)
	// Consumer is the source of "queue consume" on queue.
	Consumer(queue string) Consumer
	Close()
}

// PolicyChange is what "queue policy" sets: nil fields stay.
type PolicyChange struct {
	MaxDelivery *int
	Poison      *string
	Dedupe      *time.Duration
	Lock        *time.Duration
}

// OpenQueues opens the backend of the queue commands: remote when remote
// is not nil, else the store of env's --db. maxBody bounds a published
// body (0: the default).
func OpenQueues(ctx context.Context, env *clicore.Env, remote *Remote, maxBody int) (Queues, error) {
	if remote != nil {
		return &remoteQueues{remote}, nil
	}
	c, drv, err := queueClient(ctx, env, maxBody)
	if err != nil {
		return nil, err
	}
	return &localQueues{c: c, drv: drv}, nil
}

// localQueues runs the queue commands on the store.
type localQueues struct {
	c   *convoy.Client
	drv *clicore.Database
}

func (l *localQueues) Close() { l.drv.Close() }

func (l *localQueues) Publish(ctx context.Context, queue string, m convoy.Message) (convoy.Published, error) {
	res, err := l.c.Publish(ctx, queue, m)
	if err != nil {
		return convoy.Published{}, queueErr(l.drv, err)
	}
	return res[0], nil
}

func (l *localQueues) Peek(ctx context.Context, queue, session string, from int64, limit int) (*convoy.Session, []*convoy.StoredMessage, int64, error) {
	s, err := mustSession(ctx, l.c, l.drv, queue, session)
	if err != nil {
		return nil, nil, 0, err
	}
	ms, err := l.c.Peek(ctx, queue, session, from, limit)
	if err != nil {
		return nil, nil, 0, l.drv.StoreErr(err)
	}
	var next int64
	if len(ms) == limit {
		next = ms[len(ms)-1].Seq + 1
	}
	return s, ms, next, nil
}

func (l *localQueues) Sessions(ctx context.Context, queue, after string, limit int) ([]*convoy.Session, string, error) {
	if _, err := mustQueue(ctx, l.drv, queue); err != nil {
		return nil, "", err
	}
	ss, err := l.c.Sessions(ctx, queue, after, limit)
	if err != nil {
		return nil, "", l.drv.StoreErr(err)
	}
	next := ""
	if len(ss) == limit {
		next = ss[len(ss)-1].ID
	}
	return ss, next, nil
}

func (l *localQueues) Queues(ctx context.Context) ([]*convoy.Queue, error) {
	qs, err := l.c.Queues(ctx)
	return qs, l.drv.StoreErr(err)
}

func (l *localQueues) Policy(ctx context.Context, queue string) (*convoy.Queue, error) {
	return mustQueue(ctx, l.drv, queue)
}

func (l *localQueues) SetPolicy(ctx context.Context, queue string, ch PolicyChange) (*convoy.Queue, bool, error) {
	created := false
	p, err := l.c.QueuePolicy(ctx, queue)
	switch {
	case errors.Is(err, store.ErrNotFound):
		created = true
		p = convoy.QueuePolicy{Name: queue}
	case err != nil:
		return nil, false, l.drv.StoreErr(err)
	}
	if ch.MaxDelivery != nil {
		p.MaxDeliveryCount = *ch.MaxDelivery
	}
	if ch.Poison != nil {
		p.Poison = convoy.PoisonPolicy(*ch.Poison)
	}
	if ch.Dedupe != nil {
		p.DedupeWindow = *ch.Dedupe
		if *ch.Dedupe == 0 {
			p.DedupeWindow = convoy.NoDedupe
		}
	}
	if ch.Lock != nil {
		p.LockDuration = *ch.Lock
	}
	if err := l.c.SetQueuePolicy(ctx, p); err != nil {
		return nil, false, l.drv.StoreErr(err)
	}
	q, err := mustQueue(ctx, l.drv, queue)
	return q, created, err
}

func (l *localQueues) DeadLetters(ctx context.Context, queue, session string, after convoy.DeadLetterCursor, limit int) ([]*convoy.StoredMessage, *convoy.DeadLetterCursor, error) {
	if session != "" {
		if _, err := mustSession(ctx, l.c, l.drv, queue, session); err != nil {
			return nil, nil, err
		}
	} else if _, err := mustQueue(ctx, l.drv, queue); err != nil {
		return nil, nil, err
	}
	ms, err := l.c.DeadLetters(ctx, queue, session, after, limit)
	if err != nil {
		return nil, nil, l.drv.StoreErr(err)
	}
	var next *convoy.DeadLetterCursor
	if len(ms) == limit {
		next = &convoy.DeadLetterCursor{SessionID: ms[len(ms)-1].SessionID, Seq: ms[len(ms)-1].Seq}
	}
	return ms, next, nil
}

func (l *localQueues) Resolve(ctx context.Context, queue, session string, seq int64, resubmit bool) (*convoy.Session, error) {
	if _, err := mustSession(ctx, l.c, l.drv, queue, session); err != nil {
		return nil, err
	}
	var err error
	if resubmit {
		err = l.c.ResubmitDeadLetter(ctx, queue, session, seq)
	} else {
		err = l.c.DiscardDeadLetter(ctx, queue, session, seq)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, clicore.Wrap(fmt.Sprintf("no dead-lettered message %d in session %q of queue %q (see 'drover queue dlq --queue %s --session %s')",
			seq, session, queue, queue, session), err)
	}
	if err != nil {
		return nil, l.drv.StoreErr(err)
	}
	s, err := l.c.Session(ctx, queue, session)
	return s, l.drv.StoreErr(err)
}

func (l *localQueues) Consumer(queue string) Consumer {
	return localConsumer{c: l.c, drv: l.drv, queue: queue}
}

// remoteQueues runs the queue commands against a server.
type remoteQueues struct{ r *Remote }

func (r *remoteQueues) Close() {}

func (r *remoteQueues) Publish(ctx context.Context, queue string, m convoy.Message) (convoy.Published, error) {
	if len(m.Body) == 0 || !json.Valid(m.Body) {
		return convoy.Published{}, clicore.Usagef("with --server the message body must be a JSON document (the API carries bodies as JSON), e.g. --body '{\"op\":\"create\"}' or --body '\"text\"'")
	}
	pm := droverapi.PublishMessage{SessionID: m.SessionID, Body: m.Body, MessageID: m.MessageID, EndOfSequence: m.EndOfSequence}
	if !m.NotBefore.IsZero() {
		pm.NotBefore = &m.NotBefore
	}
	res, err := r.r.Client.Publish(ctx, queue, pm)
	if err != nil {
		return convoy.Published{}, r.r.Err(err)
	}
	if len(res) != 1 {
		return convoy.Published{}, fmt.Errorf("server: publish answered %d results for one message", len(res))
	}
	return convoy.Published{SessionID: res[0].SessionID, Seq: res[0].Seq, Duplicate: res[0].Duplicate}, nil
}

func (r *remoteQueues) Peek(ctx context.Context, queue, session string, from int64, limit int) (*convoy.Session, []*convoy.StoredMessage, int64, error) {
	page, err := r.r.Client.Peek(ctx, queue, session, from, limit)
	if err != nil {
		return nil, nil, 0, r.r.Err(err)
	}
	s, err := r.r.findSession(ctx, queue, session)
	if err != nil {
		return nil, nil, 0, err
	}
	var ms []*convoy.StoredMessage
	for i := range page.Messages {
		ms = append(ms, remoteMessage(&page.Messages[i]))
	}
	return s, ms, page.NextFromSeq, nil
}

func (r *remoteQueues) Sessions(ctx context.Context, queue, after string, limit int) ([]*convoy.Session, string, error) {
	page, err := r.r.Client.Sessions(ctx, queue, after, limit)
	if err != nil {
		return nil, "", r.r.Err(err)
	}
	var ss []*convoy.Session
	for i := range page.Sessions {
		ss = append(ss, remoteSession(&page.Sessions[i]))
	}
	return ss, page.NextAfter, nil
}

func (r *remoteQueues) Queues(ctx context.Context) ([]*convoy.Queue, error) {
	list, err := r.r.Client.Queues(ctx)
	if err != nil {
		return nil, r.r.Err(err)
	}
	var qs []*convoy.Queue
	for i := range list {
		qs = append(qs, remoteQueue(&list[i]))
	}
	return qs, nil
}

func (r *remoteQueues) Policy(ctx context.Context, queue string) (*convoy.Queue, error) {
	q, err := r.r.Client.Policy(ctx, queue)
	if err != nil {
		return nil, r.r.Err(err)
	}
	return remoteQueue(q), nil
}

func (r *remoteQueues) SetPolicy(ctx context.Context, queue string, ch PolicyChange) (*convoy.Queue, bool, error) {
	// The API takes milliseconds.
	if (ch.Dedupe != nil && *ch.Dedupe%time.Millisecond != 0) || (ch.Lock != nil && *ch.Lock%time.Millisecond != 0) {
		return nil, false, clicore.Usagef("with --server, --dedupe-window and --lock-duration must be whole milliseconds")
	}
	api := droverapi.PolicyChange{MaxDeliveryCount: ch.MaxDelivery, PoisonPolicy: ch.Poison}
	if ch.Dedupe != nil {
		ms := ch.Dedupe.Milliseconds()
		api.DedupeWindowMS = &ms
	}
	if ch.Lock != nil {
		ms := ch.Lock.Milliseconds()
		api.LockDurationMS = &ms
	}
	q, created, err := r.r.Client.SetPolicy(ctx, queue, api)
	if err != nil {
		return nil, false, r.r.Err(err)
	}
	return remoteQueue(q), created, nil
}

func (r *remoteQueues) DeadLetters(ctx context.Context, queue, session string, after convoy.DeadLetterCursor, limit int) ([]*convoy.StoredMessage, *convoy.DeadLetterCursor, error) {
	p := droverclient.DeadLetterParams{Session: session, Limit: limit}
	if after.SessionID != "" || after.Seq > 0 {
		p.After = &droverclient.DeadLetterCursor{AfterSession: after.SessionID, AfterSeq: after.Seq}
	}
	page, err := r.r.Client.DeadLetters(ctx, queue, p)
	if err != nil {
		return nil, nil, r.r.Err(err)
	}
	var ms []*convoy.StoredMessage
	for i := range page.DeadLetters {
		ms = append(ms, remoteMessage(&page.DeadLetters[i]))
	}
	var next *convoy.DeadLetterCursor
	if page.Next != nil {
		next = &convoy.DeadLetterCursor{SessionID: page.Next.AfterSession, Seq: page.Next.AfterSeq}
	}
	return ms, next, nil
}

func (r *remoteQueues) Resolve(ctx context.Context, queue, session string, seq int64, resubmit bool) (*convoy.Session, error) {
	var err error
	if resubmit {
		err = r.r.Client.ResubmitDeadLetter(ctx, queue, session, seq)
	} else {
		err = r.r.Client.DiscardDeadLetter(ctx, queue, session, seq)
	}
	if err != nil {
		return nil, r.r.Err(err)
	}
	return r.r.findSession(ctx, queue, session)
}

func (r *remoteQueues) Consumer(queue string) Consumer {
	return &remoteConsumer{r: r.r, queue: queue}
}

// queueClient opens the store (never creating or migrating it) and a convoy
// client on it. The caller closes the database.
func queueClient(ctx context.Context, env *clicore.Env, maxBody int) (*convoy.Client, *clicore.Database, error) {
	drv, err := env.OpenStore(ctx, clicore.OpenOpts{LockTimeout: true})
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	id := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == '/' || !unicode.IsPrint(r) {
			return '-'
		}
		return r
	}, fmt.Sprintf("drover-cli-%s-%d", host, os.Getpid()))
	c, err := convoy.New(convoy.Config{Store: drv.Driver, InstanceID: id, MaxBodyBytes: maxBody, Logger: env.Logger(slog.LevelWarn)})
	if err != nil {
		drv.Close()
		return nil, nil, err
	}
	return c, drv, nil
}

// queueErr explains convoy errors in the CLI's terms.
func queueErr(d *clicore.Database, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, convoy.ErrSessionClosed):
		return clicore.Wrap(fmt.Sprintf("%v: its end-of-sequence message was published, nothing more can be published to it", err), err)
	}
	return d.StoreErr(err)
}

// mustQueue fails unless the queue exists.
func mustQueue(ctx context.Context, drv *clicore.Database, name string) (*convoy.Queue, error) {
	q, err := drv.Reader().QueueGet(ctx, &store.QueueGetParams{Name: name})
	if errors.Is(err, store.ErrNotFound) {
		return nil, clicore.Wrap(fmt.Sprintf("queue %q not found: nothing was published to it and no policy was set (see 'drover queue list')", name), err)
	}
	return q, drv.StoreErr(err)
}

// mustSession fails unless the session exists.
func mustSession(ctx context.Context, c *convoy.Client, drv *clicore.Database, queue, id string) (*convoy.Session, error) {
	if _, err := mustQueue(ctx, drv, queue); err != nil {
		return nil, err
	}
	s, err := c.Session(ctx, queue, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, clicore.Wrap(fmt.Sprintf("session %q of queue %q not found: nothing was published to it (see 'drover queue sessions --queue %s')", id, queue, queue), err)
	}
	return s, drv.StoreErr(err)
}
