package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// The session-queue primitives (store.QueueExecutor). SQLite has one writer,
// so a write transaction reads what it is about to change and computes the
// rest in Go: sequence numbers follow commit order because transactions do.

// sessKey names a session.
type sessKey struct{ queue, id string }

// rounds splits the items of a batch so that no round holds two items of one
// session: the k-th item of a session goes to round k. Rounds run one after
// the other, so items of one session apply in call order.
func rounds(n int, key func(i int) sessKey) [][]int {
	seen := make(map[sessKey]int, n)
	var out [][]int
	for i := range n {
		k := key(i)
		r := seen[k]
		seen[k] = r + 1
		if r == len(out) {
			out = append(out, make([]int, 0, n))
		}
		out[r] = append(out[r], i)
	}
	return out
}

func refKey(r store.SessionRef) sessKey { return sessKey{r.Queue, r.SessionID} }

func scanQueue(r *sql.Rows) (*dt.Queue, error) {
	var (
		q                dt.Queue
		policy           string
		window, lock     int64
		created, updated int64
	)
	if err := r.Scan(&q.Name, &q.MaxDeliveryCount, &policy, &window, &lock, &created, &updated); err != nil {
		return nil, translate(err)
	}
	q.PoisonPolicy = dt.PoisonPolicy(policy)
	q.DedupeWindow = time.Duration(window) * time.Microsecond
	q.LockDuration = time.Duration(lock) * time.Microsecond
	q.CreatedAt, q.UpdatedAt = fromUS(created), fromUS(updated)
	return &q, nil
}

func scanSession(r *sql.Rows) (*dt.Session, error) {
	var (
		s                dt.Session
		ready, until     sql.NullInt64
		holder           sql.NullString
		created, updated int64
	)
	if err := r.Scan(&s.Queue, &s.ID, &s.NextSeq, &s.Pending, &ready, &holder, &s.LockToken, &until, &s.State,
		&s.Closed, &s.Blocked, &created, &updated); err != nil {
		return nil, translate(err)
	}
	s.ReadyAt, s.LockedUntil = fromNullUS(ready), fromNullUS(until)
	s.LockHolder = holder.String
	s.CreatedAt, s.UpdatedAt = fromUS(created), fromUS(updated)
	return &s, nil
}

func scanMessage(r *sql.Rows) (*dt.Message, error) {
	var (
		m               dt.Message
		msgID, reason   sql.NullString
		deadAt          sql.NullInt64
		avail, enqueued int64
	)
	if err := r.Scan(&m.Queue, &m.SessionID, &m.Seq, &msgID, &m.Body, &m.DeliveryCount, &m.EndOfSequence, &avail,
		&m.Dead, &reason, &deadAt, &enqueued, &m.TraceContext); err != nil {
		return nil, translate(err)
	}
	m.MessageID, m.DeadReason = msgID.String, reason.String
	m.DeadAt = fromNullUS(deadAt)
	m.AvailableAt, m.EnqueuedAt = fromUS(avail), fromUS(enqueued)
	return &m, nil
}

// all runs query and scans every row with scan.
func all[T any](e *executor, ctx context.Context, what, query string, args []any, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := e.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", what, translate(err))
	}
	return out, nil
}

// ---- queues ----

func (e *executor) QueuePut(ctx context.Context, params *store.QueuePutParams) error {
	q := params.Queue
	_, err := e.exec(ctx, qQueuePut, q.Name, q.MaxDeliveryCount, string(q.PoisonPolicy), q.DedupeWindow.Microseconds(),
		q.LockDuration.Microseconds(), us(q.CreatedAt), us(q.UpdatedAt))
	if err != nil {
		return fmt.Errorf("sqlite: put queue: %w", err)
	}
	return nil
}

func (e *executor) QueueGet(ctx context.Context, params *store.QueueGetParams) (*dt.Queue, error) {
	name := params.Name
	qs, err := all(e, ctx, "get queue", qQueueGet, []any{name}, scanQueue)
	if err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("queue %q: %w", name, store.ErrNotFound)
	}
	return qs[0], nil
}

func (e *executor) QueueDepth(ctx context.Context, params *store.QueueDepthParams) (store.QueueDepth, error) {
	queue, limit := params.Queue, params.Limit
	var d store.QueueDepth
	var oldest sql.NullInt64
	if err := e.queryOne(ctx, qQueueDepth, []any{queue, limit + 1, limit, us(params.Now)}, &d.Sessions, &d.Messages, &oldest); err != nil {
		return d, fmt.Errorf("sqlite: queue depth: %w", err)
	}
	if oldest.Valid {
		d.OldestWaiting = fromUS(oldest.Int64)
	}
	if d.Sessions > limit {
		d.Sessions, d.Capped = limit, true
	}
	return d, nil
}

func (e *executor) QueueList(ctx context.Context, p *store.QueueListParams) ([]*dt.Queue, error) {
	q, args := qQueueList, []any{p.AfterName}
	if ns, ok := store.ListNamespace(p.Namespace); ok {
		if ns == "" {
			q += ` AND instr(name, '/') = 0`
		} else {
			lo, hi := store.NamespaceRange(ns)
			q += ` AND name >= ? AND name < ?`
			args = append(args, lo, hi)
		}
	}
	q += ` ORDER BY name`
	if p.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, p.Limit)
	}
	return all(e, ctx, "list queues", q, args, scanQueue)
}

// ---- publish ----

type dedupeKey struct{ queue, id string }

// pubSession is what a publish knows of one session it writes to.
type pubSession struct {
	exists     bool
	nextSeq    int64 // last seq assigned, this call's messages included
	closed     bool  // closed before or by this call
	n          int64 // messages this call adds
	firstAvail int64
	eos        bool
}

func (e *executor) MessagePublishMany(ctx context.Context, p *store.MessagePublishManyParams) ([]store.PublishResult, error) {
	msgs := p.Messages
	res := make([]store.PublishResult, len(msgs))
	if len(msgs) == 0 {
		return res, nil
	}
	now := us(p.Now)

	// What the store knows: queue windows, session states, message IDs seen.
	var queueNames []string
	windows := map[string]int64{}
	sessions := map[sessKey]*pubSession{}
	var sessRows [][]any
	for _, m := range msgs {
		if _, ok := windows[m.Queue]; !ok {
			windows[m.Queue] = dt.DefaultDedupeWindow.Microseconds()
			queueNames = append(queueNames, m.Queue)
		}
		k := sessKey{m.Queue, m.SessionID}
		if sessions[k] == nil {
			sessions[k] = &pubSession{}
			sessRows = append(sessRows, []any{m.Queue, m.SessionID})
		}
	}
	existing := map[string]bool{}
	rows, err := e.query(ctx, qQueueWindows, jsonList(queueNames))
	if err != nil {
		return nil, fmt.Errorf("sqlite: publish: %w", err)
	}
	for rows.Next() {
		var (
			name string
			w    int64
		)
		if err := rows.Scan(&name, &w); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: publish: %w", translate(err))
		}
		windows[name], existing[name] = w, true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: publish: %w", translate(err))
	}
	err = e.queryRows(ctx, "publish", mSessionPublishRead, sessRows, func(r *sql.Rows) error {
		var (
			k      sessKey
			next   int64
			closed bool
		)
		if err := r.Scan(&k.queue, &k.id, &next, &closed); err != nil {
			return err
		}
		s := sessions[k]
		s.exists, s.nextSeq, s.closed = true, next, closed
		return nil
	})
	if err != nil {
		return nil, err
	}
	var idRows [][]any
	seenIDs := map[dedupeKey]bool{}
	for _, m := range msgs {
		k := dedupeKey{m.Queue, m.MessageID}
		if m.MessageID != "" && windows[m.Queue] > 0 && !seenIDs[k] {
			seenIDs[k] = true
			idRows = append(idRows, []any{m.Queue, m.MessageID})
		}
	}
	known := map[dedupeKey]int64{} // unexpired IDs: the original's seq
	err = e.queryRows(ctx, "publish", mDedupeRead, idRows, func(r *sql.Rows) error {
		var (
			k        dedupeKey
			seq, exp int64
		)
		if err := r.Scan(&k.queue, &k.id, &seq, &exp); err != nil {
			return err
		}
		if exp > now {
			known[k] = seq
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	// Plan: duplicates first (a retried end-of-sequence message is a
	// duplicate, not an error), then sequence numbers.
	first := map[dedupeKey]int{} // first message of the call with an ID
	dupOf := map[int]int{}
	var msgRows, dedupeRows [][]any
	for i, m := range msgs {
		dk := dedupeKey{m.Queue, m.MessageID}
		dedupe := m.MessageID != "" && windows[m.Queue] > 0
		if dedupe {
			if seq, ok := known[dk]; ok {
				res[i] = store.PublishResult{Seq: seq, Duplicate: true}
				continue
			}
			if j, ok := first[dk]; ok {
				dupOf[i] = j
				continue
			}
			first[dk] = i
		}
		s := sessions[sessKey{m.Queue, m.SessionID}]
		if s.closed {
			return nil, fmt.Errorf("publish to session %q of queue %q: %w", m.SessionID, m.Queue, store.ErrSessionClosed)
		}
		avail := now
		if !m.AvailableAt.IsZero() {
			avail = us(m.AvailableAt)
		}
		s.nextSeq++
		if s.n == 0 {
			s.firstAvail = avail
		}
		s.n++
		if m.EndOfSequence {
			s.closed, s.eos = true, true
		}
		res[i].Seq = s.nextSeq
		body := m.Body
		if body == nil {
			body = []byte{}
		}
		msgRows = append(msgRows, []any{m.Queue, m.SessionID, s.nextSeq, nullStr(m.MessageID), body, 0,
			m.EndOfSequence, avail, false, nil, nil, now, m.TraceContext})
		if dedupe {
			dedupeRows = append(dedupeRows, []any{m.Queue, m.MessageID, m.SessionID, s.nextSeq, now + windows[m.Queue]})
		}
	}
	for i, j := range dupOf {
		res[i] = store.PublishResult{Seq: res[j].Seq, Duplicate: true}
	}
	if len(msgRows) == 0 {
		return res, nil
	}

	// Write.
	for _, name := range queueNames {
		if !existing[name] {
			if _, err := e.exec(ctx, qQueueCreate, name, now, now); err != nil {
				return nil, fmt.Errorf("sqlite: publish: create queue: %w", err)
			}
		}
	}
	var upRows [][]any
	for _, r := range sessRows {
		s := sessions[sessKey{r[0].(string), r[1].(string)}]
		if s.n > 0 {
			upRows = append(upRows, []any{r[0], r[1], s.n, s.n, s.firstAvail, s.eos, now, now})
		}
	}
	if err := e.execRows(ctx, "publish: sessions", mSessionPublish, upRows, nil); err != nil {
		return nil, err
	}
	if err := e.execRows(ctx, "publish: messages", mMessageInsert, msgRows, nil); err != nil {
		return nil, err
	}
	if err := e.execRows(ctx, "publish: dedupe", mDedupeUpsert, dedupeRows, nil); err != nil {
		return nil, err
	}
	return res, nil
}

// ---- locks ----

func (e *executor) SessionAccept(ctx context.Context, p *store.SessionAcceptParams) ([]*dt.Session, error) {
	var dur any
	if p.LockDuration > 0 {
		dur = p.LockDuration.Microseconds()
	}
	now := us(p.Now)
	if p.SessionID != "" {
		got, err := all(e, ctx, "accept session", qSessionAcceptNamed, []any{p.Holder, now, dur, p.Queue, p.SessionID}, scanSession)
		if err != nil || len(got) > 0 {
			return got, err
		}
		var n int
		if err := e.queryOne(ctx, qSessionExists, []any{p.Queue, p.SessionID}, &n); err != nil {
			return nil, fmt.Errorf("sqlite: accept session: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("session %q of queue %q: %w", p.SessionID, p.Queue, store.ErrNotFound)
		}
		return nil, fmt.Errorf("session %q of queue %q: %w", p.SessionID, p.Queue, store.ErrSessionLocked)
	}
	got, err := all(e, ctx, "accept sessions", qSessionAcceptNext, []any{p.Holder, now, dur, p.Queue, p.Limit}, scanSession)
	if err != nil {
		return nil, err
	}
	sortByReady(got)
	return got, nil
}

func (e *executor) SessionAvailable(ctx context.Context, params *store.SessionAvailableParams) (bool, error) {
	queue, now := params.Queue, params.Now
	var ok bool
	if err := e.queryOne(ctx, qSessionAvailable, []any{queue, us(now)}, &ok); err != nil {
		return false, fmt.Errorf("sqlite: sessions available: %w", err)
	}
	return ok, nil
}

func (e *executor) SessionNextReady(ctx context.Context, params *store.SessionNextReadyParams) (time.Time, error) {
	var next sql.NullInt64
	if err := e.queryOne(ctx, qSessionNextReady, []any{params.Queue}, &next); err != nil {
		return time.Time{}, fmt.Errorf("sqlite: next ready session: %w", err)
	}
	if !next.Valid {
		return time.Time{}, nil
	}
	return fromUS(next.Int64), nil
}

// sortByReady orders sessions oldest head first, then by ID.
func sortByReady(ss []*dt.Session) {
	sort.Slice(ss, func(i, j int) bool {
		a, b := ss[i], ss[j]
		if !a.ReadyAt.Equal(*b.ReadyAt) {
			return a.ReadyAt.Before(*b.ReadyAt)
		}
		return a.ID < b.ID
	})
}

func (e *executor) queryOne(ctx context.Context, query string, args []any, dest ...any) error {
	rows, err := e.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return translate(err)
		}
		return sql.ErrNoRows
	}
	return translate(rows.Scan(dest...))
}

// lockUpdate runs a multi-row lock update (renew, release) round by round;
// an item whose row the statement did not return lost its lock.
func (e *executor) lockUpdate(ctx context.Context, what string, m multiRow, refs []store.SessionRef, row func(store.SessionRef) []any) ([]error, error) {
	errs := make([]error, len(refs))
	for _, round := range rounds(len(refs), func(i int) sessKey { return refKey(refs[i]) }) {
		rows := make([][]any, len(round))
		for j, i := range round {
			rows[j] = row(refs[i])
		}
		done := make(map[sessKey]bool, len(round))
		err := e.queryRows(ctx, what, m, rows, func(r *sql.Rows) error {
			var k sessKey
			if err := r.Scan(&k.queue, &k.id); err != nil {
				return err
			}
			done[k] = true
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, i := range round {
			if !done[refKey(refs[i])] {
				errs[i] = store.ErrLockLost
			}
		}
	}
	return errs, nil
}

func (e *executor) SessionRenew(ctx context.Context, params *store.SessionRenewParams) ([]error, error) {
	refs, now, until := params.Refs, params.Now, params.Until
	n, u := us(now), us(until)
	return e.lockUpdate(ctx, "renew sessions", mSessionRenew, refs, func(r store.SessionRef) []any {
		return []any{r.Queue, r.SessionID, r.Token, n, u}
	})
}

func (e *executor) SessionRelease(ctx context.Context, params *store.SessionReleaseParams) ([]error, error) {
	refs, now := params.Refs, params.Now
	n := us(now)
	return e.lockUpdate(ctx, "release sessions", mSessionRelease, refs, func(r store.SessionRef) []any {
		return []any{r.Queue, r.SessionID, r.Token, n}
	})
}

// head is what mSessionHeads tells of a held session.
type head struct {
	blocked bool
	seq     sql.NullInt64
}

// heads returns the held sessions among refs (one round: distinct sessions)
// with their head.
func (e *executor) heads(ctx context.Context, what string, refs []store.SessionRef, round []int, now int64) (map[sessKey]head, error) {
	rows := make([][]any, len(round))
	for j, i := range round {
		r := refs[i]
		rows[j] = []any{r.Queue, r.SessionID, r.Token, now}
	}
	out := make(map[sessKey]head, len(round))
	err := e.queryRows(ctx, what, mSessionHeads, rows, func(r *sql.Rows) error {
		var (
			k sessKey
			h head
		)
		if err := r.Scan(&k.queue, &k.id, &h.blocked, &h.seq); err != nil {
			return err
		}
		out[k] = h
		return nil
	})
	return out, err
}

// ---- receive and settle ----

func (e *executor) MessageReceiveMany(ctx context.Context, params *store.MessageReceiveManyParams) ([]*dt.Message, []error, error) {
	refs, now := params.Refs, params.Now
	msgs := make([]*dt.Message, len(refs))
	errs := make([]error, len(refs))
	n := us(now)
	for _, round := range rounds(len(refs), func(i int) sessKey { return refKey(refs[i]) }) {
		held, err := e.receiveHeads(ctx, "receive", refs, round, n, msgs)
		if err != nil {
			return nil, nil, err
		}
		for _, i := range round {
			if !held[refKey(refs[i])] {
				errs[i] = store.ErrLockLost
			}
		}
	}
	return msgs, errs, nil
}

// receiveHeads receives the heads of the sessions refs[i], i in round
// (distinct sessions): it reports which ones are held, and sets msgs[i] to
// the head of each held session that is not blocked and whose head is
// available at now, its delivery counted.
func (e *executor) receiveHeads(ctx context.Context, what string, refs []store.SessionRef, round []int, now int64, msgs []*dt.Message) (map[sessKey]bool, error) {
	rows := make([][]any, len(round))
	at := make(map[sessKey]int, len(round))
	for j, i := range round {
		r := refs[i]
		rows[j] = []any{r.Queue, r.SessionID, r.Token, now}
		at[refKey(r)] = i
	}
	held := make(map[sessKey]bool, len(round))
	var delivered [][]any
	err := e.queryRows(ctx, what, mSessionHeadsReady, rows, func(r *sql.Rows) error {
		var (
			k                 sessKey
			seq, count, avail sql.NullInt64
			enqueued          sql.NullInt64
			msgID, tc         sql.NullString
			body              []byte
			eos               sql.NullBool
		)
		if err := r.Scan(&k.queue, &k.id, &seq, &msgID, &body, &count, &eos, &avail, &enqueued, &tc); err != nil {
			return err
		}
		held[k] = true
		if !seq.Valid {
			return nil
		}
		msgs[at[k]] = &dt.Message{Queue: k.queue, SessionID: k.id, Seq: seq.Int64, MessageID: msgID.String, Body: body,
			DeliveryCount: int(count.Int64) + 1, EndOfSequence: eos.Bool, AvailableAt: fromUS(avail.Int64),
			EnqueuedAt: fromUS(enqueued.Int64), TraceContext: tc.String}
		delivered = append(delivered, []any{k.queue, k.id, seq.Int64})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := e.execRows(ctx, what, mMessageDelivered, delivered, nil); err != nil {
		return nil, err
	}
	return held, nil
}

func (e *executor) MessageSettleMany(ctx context.Context, params *store.MessageSettleManyParams) ([]error, error) {
	settles, now := params.Settles, params.Now
	_, errs, err := e.settle(ctx, settles, now, false)
	return errs, err
}

func (e *executor) MessageSettleReceiveMany(ctx context.Context, params *store.MessageSettleReceiveManyParams) ([]*dt.Message, []error, error) {
	settles, now := params.Settles, params.Now
	return e.settle(ctx, settles, now, true)
}

// settle runs MessageSettleMany and, with receive, MessageSettleReceiveMany.
// Per round (distinct sessions): mSessionSettle checks the lock and the head
// and does the session's bookkeeping, one statement per chunk; in the usual
// case it updates every row, and only a chunk where it did not is looked at
// again (mSessionHeads) to tell which settles failed and why. Then the
// messages of the applied settles are deleted, abandoned or dead-lettered,
// and the heads they leave are received (receiveHeads).
func (e *executor) settle(ctx context.Context, settles []store.MessageSettle, now time.Time, receive bool) ([]*dt.Message, []error, error) {
	for _, s := range settles {
		switch s.Action {
		case store.SettleComplete, store.SettleAbandon, store.SettleDeadLetter:
		default:
			return nil, nil, fmt.Errorf("sqlite: settle: unknown action %q", s.Action)
		}
	}
	var msgs []*dt.Message
	if receive {
		msgs = make([]*dt.Message, len(settles))
	}
	errs := make([]error, len(settles))
	n := us(now)
	refs := make([]store.SessionRef, len(settles))
	for i, s := range settles {
		refs[i] = s.Ref
	}
	for _, round := range rounds(len(refs), func(i int) sessKey { return refKey(refs[i]) }) {
		rows := make([][]any, len(round))
		for j, i := range round {
			s := settles[i]
			dec, block, abandon, avail := 1, false, false, any(nil)
			switch s.Action {
			case store.SettleAbandon:
				dec, abandon, avail = 0, true, abandonedAt(s, n)
			case store.SettleDeadLetter:
				block = s.Block
			}
			var state any
			if s.SetState && s.State != nil {
				state = s.State
			}
			rows[j] = []any{s.Ref.Queue, s.Ref.SessionID, s.Ref.Token, s.Seq, n, dec, block, s.SetState, state, abandon, avail}
		}
		var short []int // indexes into round of the chunks where some row was not updated
		err := e.execRows(ctx, "settle: sessions", mSessionSettle, rows, func(res sql.Result, first, count int) error {
			if c, err := res.RowsAffected(); err != nil {
				return fmt.Errorf("sqlite: settle: sessions: %w", err)
			} else if int(c) < count {
				for j := first; j < first+count; j++ {
					short = append(short, round[j])
				}
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		if len(short) > 0 {
			// The update changed no message, so the heads are still those
			// it saw: a settle applied where the lock is held and its seq
			// is the head.
			hs, err := e.heads(ctx, "settle", refs, short, n)
			if err != nil {
				return nil, nil, err
			}
			for _, i := range short {
				switch h, held := hs[refKey(refs[i])]; {
				case !held:
					errs[i] = store.ErrLockLost
				case !h.seq.Valid || h.seq.Int64 != settles[i].Seq:
					errs[i] = store.ErrNotHead
				}
			}
		}
		var complete, abandon, dead [][]any
		var recv []int
		for _, i := range round {
			if errs[i] != nil {
				continue
			}
			s := settles[i]
			k := refKey(s.Ref)
			switch s.Action {
			case store.SettleComplete:
				complete = append(complete, []any{k.queue, k.id, s.Seq})
			case store.SettleAbandon:
				abandon = append(abandon, []any{k.queue, k.id, s.Seq, abandonedAt(s, n)})
			case store.SettleDeadLetter:
				dead = append(dead, []any{k.queue, k.id, s.Seq, nullStr(s.Reason), n})
			}
			if receive && s.ReceiveNext {
				recv = append(recv, i)
			}
		}
		if err := e.execRows(ctx, "settle: complete", mMessageComplete, complete, nil); err != nil {
			return nil, nil, err
		}
		if err := e.execRows(ctx, "settle: abandon", mMessageAbandon, abandon, nil); err != nil {
			return nil, nil, err
		}
		if err := e.execRows(ctx, "settle: dead-letter", mMessageDeadLetter, dead, nil); err != nil {
			return nil, nil, err
		}
		// The settles held their locks a statement ago, and nothing since
		// released them.
		if _, err := e.receiveHeads(ctx, "settle: receive", refs, recv, n, msgs); err != nil {
			return nil, nil, err
		}
	}
	return msgs, errs, nil
}

// abandonedAt is when an abandoned message is available again.
func abandonedAt(s store.MessageSettle, now int64) int64 {
	if s.AvailableAt.IsZero() {
		return now
	}
	return us(s.AvailableAt)
}

// ---- sessions ----

func (e *executor) SessionGet(ctx context.Context, params *store.SessionGetParams) (*dt.Session, error) {
	queue, sessionID := params.Queue, params.SessionID
	got, err := all(e, ctx, "get session", qSessionGet, []any{queue, sessionID}, scanSession)
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("session %q of queue %q: %w", sessionID, queue, store.ErrNotFound)
	}
	return got[0], nil
}

func (e *executor) SessionList(ctx context.Context, p *store.SessionListParams) ([]*dt.Session, error) {
	q := `SELECT ` + sessionCols + ` FROM queue_sessions WHERE queue = ? AND session_id > ? ORDER BY session_id`
	args := []any{p.Queue, p.AfterID}
	if p.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, p.Limit)
	}
	return all(e, ctx, "list sessions", q, args, scanSession)
}

func (e *executor) SessionStateSet(ctx context.Context, params *store.SessionStateSetParams) error {
	ref, state, now := params.Ref, params.State, params.Now
	var st any
	if state != nil {
		st = state
	}
	r, err := e.exec(ctx, qSessionStateSet, st, us(now), ref.Queue, ref.SessionID, ref.Token, us(now))
	if err != nil {
		return fmt.Errorf("sqlite: set session state: %w", err)
	}
	if n, err := r.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return fmt.Errorf("sqlite: set session state: %w", err)
		}
		return fmt.Errorf("session %q of queue %q: %w", ref.SessionID, ref.Queue, store.ErrLockLost)
	}
	return nil
}

// ---- messages and the dead-letter list ----

func (e *executor) MessagePeek(ctx context.Context, p *store.MessagePeekParams) ([]*dt.Message, error) {
	q := `SELECT ` + messageCols + ` FROM queue_messages WHERE queue = ? AND session_id = ? AND seq >= ? ORDER BY seq`
	args := []any{p.Queue, p.SessionID, p.FromSeq}
	if p.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, p.Limit)
	}
	return all(e, ctx, "peek messages", q, args, scanMessage)
}

func (e *executor) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*dt.Message, error) {
	var b strings.Builder
	b.WriteString(`SELECT ` + messageCols + ` FROM queue_messages INDEXED BY queue_messages_dead
 WHERE queue = ? AND dead = 1 AND (session_id, seq) > (?, ?)`)
	args := []any{p.Queue, p.AfterSessionID, p.AfterSeq}
	if p.SessionID != "" {
		b.WriteString(` AND session_id = ?`)
		args = append(args, p.SessionID)
	}
	b.WriteString(` ORDER BY session_id, seq`)
	if p.Limit > 0 {
		b.WriteString(` LIMIT ?`)
		args = append(args, p.Limit)
	}
	return all(e, ctx, "list dead letters", b.String(), args, scanMessage)
}

func (e *executor) DeadLetterResubmit(ctx context.Context, params *store.DeadLetterResubmitParams) error {
	queue, sessionID, seq, now := params.Queue, params.SessionID, params.Seq, params.Now
	n := us(now)
	r, err := e.exec(ctx, qMessageResubmit, n, queue, sessionID, seq)
	if err != nil {
		return fmt.Errorf("sqlite: resubmit dead letter: %w", err)
	}
	if c, err := r.RowsAffected(); err != nil || c == 0 {
		if err != nil {
			return fmt.Errorf("sqlite: resubmit dead letter: %w", err)
		}
		return fmt.Errorf("dead message %d of session %q of queue %q: %w", seq, sessionID, queue, store.ErrNotFound)
	}
	if _, err := e.exec(ctx, qSessionResubmitted, n, queue, sessionID); err != nil {
		return fmt.Errorf("sqlite: resubmit dead letter: %w", err)
	}
	return nil
}

func (e *executor) DeadLetterDiscard(ctx context.Context, params *store.DeadLetterDiscardParams) error {
	queue, sessionID, seq, now := params.Queue, params.SessionID, params.Seq, params.Now
	r, err := e.exec(ctx, qMessageDiscard, queue, sessionID, seq)
	if err != nil {
		return fmt.Errorf("sqlite: discard dead letter: %w", err)
	}
	if c, err := r.RowsAffected(); err != nil || c == 0 {
		if err != nil {
			return fmt.Errorf("sqlite: discard dead letter: %w", err)
		}
		return fmt.Errorf("dead message %d of session %q of queue %q: %w", seq, sessionID, queue, store.ErrNotFound)
	}
	if _, err := e.exec(ctx, qSessionUnblock, us(now), queue, sessionID); err != nil {
		return fmt.Errorf("sqlite: discard dead letter: %w", err)
	}
	return nil
}

func (e *executor) DedupeDeleteExpired(ctx context.Context, params *store.DedupeDeleteExpiredParams) (int, error) {
	now, limit := params.Now, params.Limit
	r, err := e.exec(ctx, qDedupeDeleteExpired, us(now), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired message IDs: %w", err)
	}
	n, err := r.RowsAffected()
	return int(n), err
}
