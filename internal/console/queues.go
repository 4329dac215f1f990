package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// listSize is the rows of one page of queues, sessions or dead letters.
const listSize = 50

type queuesData struct {
	Queues []*convoy.Queue
	After  string
	Next   string
}

// queues lists the viewer's session queues in name order, a page at a
// time (?after= the last name shown).
func (c *Console) queues(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	d := &queuesData{After: r.URL.Query().Get("after")}
	after := ""
	if d.After != "" {
		after = v.id.Qualify(d.After)
	}
	qs, err := c.opts.Queues.QueuesIn(ctx, v.id.ListNamespace(), after, listSize+1)
	if err != nil {
		return "", "", nil, err
	}
	if len(qs) > listSize {
		qs = qs[:listSize]
		d.Next = dt.LocalName(qs[listSize-1].Name)
	}
	d.Queues = qs
	return "queues", "Session queues", d, nil
}

type queueData struct {
	Queue        *convoy.QueuePolicy
	Sessions     []*convoy.Session
	After        string
	Next         string
	Dead         []*convoy.StoredMessage
	DeadNext     url.Values // the query of the next page of dead letters
	BlockedShown int
}

// loadQueue reads the policy of the viewer's queue named by the path: a
// queue nothing was published to is not found (404).
func (c *Console) loadQueue(ctx context.Context, r *http.Request, v *viewer) (*convoy.QueuePolicy, error) {
	name := r.PathValue("queue")
	stored, err := qualifyQueue(v, name)
	if err != nil {
		return nil, err
	}
	p, err := c.opts.Queues.QueuePolicy(ctx, stored)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("queue %q not found: %w", name, err)
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// queue is a queue's page: its policy, its sessions in ID order
// (?after=), and its dead letters in (session, seq) order (?dl_session=
// and ?dl_seq= continue after that dead letter).
func (c *Console) queue(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	p, err := c.loadQueue(ctx, r, v)
	if err != nil {
		return "", "", nil, err
	}
	q := r.URL.Query()
	d := &queueData{Queue: p, After: q.Get("after")}
	ss, err := c.opts.Queues.Sessions(ctx, p.Name, d.After, listSize+1)
	if err != nil {
		return "", "", nil, err
	}
	if len(ss) > listSize {
		ss = ss[:listSize]
		d.Next = ss[listSize-1].ID
	}
	d.Sessions = ss
	for _, s := range ss {
		if s.Blocked {
			d.BlockedShown++
		}
	}
	var cur convoy.DeadLetterCursor
	if cur.SessionID = q.Get("dl_session"); cur.SessionID != "" {
		if cur.Seq, err = strconv.ParseInt(q.Get("dl_seq"), 10, 64); err != nil || cur.Seq < 0 {
			return "", "", nil, fmt.Errorf("%w: dl_seq %q is not a sequence number", drover.ErrInvalidInput, q.Get("dl_seq"))
		}
	}
	dead, err := c.opts.Queues.DeadLetters(ctx, p.Name, "", cur, listSize+1)
	if err != nil {
		return "", "", nil, err
	}
	if len(dead) > listSize {
		dead = dead[:listSize]
		last := dead[listSize-1]
		d.DeadNext = url.Values{"dl_session": {last.SessionID}, "dl_seq": {strconv.FormatInt(last.Seq, 10)}}
	}
	d.Dead = dead
	return "queue", "Queue " + dt.LocalName(p.Name), d, nil
}

type sessionData struct {
	Queue    *convoy.QueuePolicy
	Session  *convoy.Session
	Messages []*convoy.StoredMessage
	More     bool
	Events   []*convoy.Event
}

// messagesShown caps the messages and events a session's page shows.
const messagesShown = 100

func (c *Console) loadSession(ctx context.Context, r *http.Request, v *viewer) (*convoy.QueuePolicy, *convoy.Session, error) {
	p, err := c.loadQueue(ctx, r, v)
	if err != nil {
		return nil, nil, err
	}
	id := r.PathValue("session")
	s, err := c.opts.Queues.Session(ctx, p.Name, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, fmt.Errorf("session %q of queue %q not found: %w", id, dt.LocalName(p.Name), err)
	}
	return p, s, err
}

// session is a session's page: its record, its messages from the head on
// (dead letters included) and its history (alerts, operator actions).
func (c *Console) session(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	p, s, err := c.loadSession(ctx, r, v)
	if err != nil {
		return "", "", nil, err
	}
	d := &sessionData{Queue: p, Session: s}
	if d.Messages, err = c.opts.Queues.Peek(ctx, p.Name, s.ID, 0, messagesShown+1); err != nil {
		return "", "", nil, err
	}
	if len(d.Messages) > messagesShown {
		d.Messages, d.More = d.Messages[:messagesShown], true
	}
	if d.Events, err = c.opts.Queues.SessionEvents(ctx, p.Name, s.ID, 0, messagesShown); err != nil {
		return "", "", nil, err
	}
	return "session", "Session " + s.ID, d, nil
}

// deadAction is what an operator does to a dead letter: resubmit it or
// discard it, the actions of "drover queue resolve".
type deadAction string

const (
	actResubmit deadAction = "resubmit"
	actDiscard  deadAction = "discard"
)

func parseDeadAction(r *http.Request) (deadAction, int64, error) {
	a := deadAction(r.PathValue("action"))
	if a != actResubmit && a != actDiscard {
		return "", 0, fmt.Errorf("%w: no action %q on a dead letter (resubmit or discard)", store.ErrNotFound, a)
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 1 {
		return "", 0, fmt.Errorf("%w: sequence number %q is not a positive number", drover.ErrInvalidInput, r.PathValue("seq"))
	}
	return a, seq, nil
}

type confirmDeadData struct {
	Queue   *convoy.QueuePolicy
	Session *convoy.Session
	Message *convoy.StoredMessage
	Action  deadAction
	What    string
}

// deadLetter finds dead letter seq of the session, or a 404.
func (c *Console) deadLetter(ctx context.Context, queue, session string, seq int64) (*convoy.StoredMessage, error) {
	ms, err := c.opts.Queues.DeadLetters(ctx, queue, session, convoy.DeadLetterCursor{SessionID: session, Seq: seq - 1}, 1)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 || ms[0].Seq != seq || ms[0].SessionID != session {
		return nil, fmt.Errorf("no dead letter %d in session %q: %w", seq, session, store.ErrNotFound)
	}
	return ms[0], nil
}

// confirmDead is the confirmation page of a dead letter's resolve: it
// says what the action will do before the button that does it.
func (c *Console) confirmDead(ctx context.Context, r *http.Request, v *viewer) (string, string, any, error) {
	a, seq, err := parseDeadAction(r)
	if err != nil {
		return "", "", nil, err
	}
	p, s, err := c.loadSession(ctx, r, v)
	if err != nil {
		return "", "", nil, err
	}
	m, err := c.deadLetter(ctx, p.Name, s.ID, seq)
	if err != nil {
		return "", "", nil, err
	}
	var what string
	if a == actResubmit {
		what = fmt.Sprintf("Message %d goes back to the head of session %s with a fresh delivery count, and the session is unblocked: it is delivered next, before the session's %d pending message%s.",
			seq, quote(s.ID), s.Pending, plural(s.Pending))
	} else {
		what = fmt.Sprintf("Message %d is deleted for good, and the session is unblocked: it goes on with its next message (%d pending). Its body is not kept anywhere else.",
			seq, s.Pending)
	}
	if !s.Blocked {
		what += " (The session is not blocked: the queue's policy skips dead letters, so this only resolves the recorded gap.)"
	}
	title := strings.ToUpper(string(a[:1])) + string(a[1:]) + " dead letter"
	return "confirm_dead", title, &confirmDeadData{Queue: p, Session: s, Message: m, Action: a, What: what}, nil
}

// resolveDead resubmits or discards a dead letter, as "drover queue
// resolve" does.
func (c *Console) resolveDead(ctx context.Context, r *http.Request, v *viewer) (string, string, error) {
	a, seq, err := parseDeadAction(r)
	if err != nil {
		return "", "", err
	}
	queue, err := qualifyQueue(v, r.PathValue("queue"))
	if err != nil {
		return "", "", err
	}
	session := r.PathValue("session")
	if a == actResubmit {
		err = c.opts.Queues.ResubmitDeadLetterAs(ctx, queue, session, seq, v.id.Actor())
	} else {
		err = c.opts.Queues.DiscardDeadLetterAs(ctx, queue, session, seq, v.id.Actor())
	}
	if errors.Is(err, store.ErrNotFound) {
		return "", "", fmt.Errorf("no dead letter %d in session %q: %w", seq, session, err)
	}
	if err != nil {
		return "", "", err
	}
	c.log.Info("console: dead letter resolved", "queue", queue, "session", session, "seq", seq, "action", a, "actor", v.id.Actor())
	done := fmt.Sprintf("Message %d resubmitted: the session is unblocked and delivers it next.", seq)
	if a == actDiscard {
		done = fmt.Sprintf("Message %d discarded: the session is unblocked.", seq)
	}
	return sessionPath(r.PathValue("queue"), session), done, nil
}

// qualifyQueue is the stored name of the viewer's queue name, as the
// API's: a name with "/" (another namespace's) is refused.
func qualifyQueue(v *viewer, name string) (string, error) {
	if p := dt.NameProblem(name); p != "" {
		return "", fmt.Errorf("%w %q: %s", convoy.ErrInvalidQueue, name, p)
	}
	return v.id.Qualify(name), nil
}

// sessionPath is the console path of a session's page.
func sessionPath(queue, session string) string {
	return "/queues/" + url.PathEscape(queue) + "/sessions/" + url.PathEscape(session)
}

// sessionOf splits an event subject "session:<queue>/<id>" (namespace
// removed) into its queue and session; ok false for a task's subject.
func sessionOf(subject string) (queue, session string, ok bool) {
	rest, ok := strings.CutPrefix(subject, "session:")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}
