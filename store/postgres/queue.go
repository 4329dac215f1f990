package postgres

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// The session-queue primitives (store.QueueExecutor); the SQL and its
// locking are in queue_queries.go.

// sessKey names a session.
type sessKey struct{ queue, id string }

type dedupeKey struct{ queue, id string }

// rounds splits the items of a batch so that no round holds two items of one
// session: the k-th item of a session goes to round k. Rounds run one after
// the other, so items of one session apply in call order (one statement
// would update a row only once).
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

func refRounds(refs []store.SessionRef) [][]int {
	return rounds(len(refs), func(i int) sessKey { return sessKey{refs[i].Queue, refs[i].SessionID} })
}

// refArrays returns the refs of a round as the arrays of sqRefs.
func refArrays(refs []store.SessionRef, round []int) (queues, ids []string, tokens []int64) {
	queues, ids, tokens = make([]string, len(round)), make([]string, len(round)), make([]int64, len(round))
	for j, i := range round {
		queues[j], ids[j], tokens[j] = refs[i].Queue, refs[i].SessionID, refs[i].Token
	}
	return queues, ids, tokens
}

func scanQueue(out *[]*dt.Queue) func(rows) error {
	return func(r rows) error {
		var (
			q            dt.Queue
			policy       string
			window, lock int64
		)
		if err := r.Scan(&q.Name, &q.MaxDeliveryCount, &policy, &window, &lock, &q.CreatedAt, &q.UpdatedAt); err != nil {
			return err
		}
		q.PoisonPolicy = dt.PoisonPolicy(policy)
		q.DedupeWindow = time.Duration(window) * time.Microsecond
		q.LockDuration = time.Duration(lock) * time.Microsecond
		q.CreatedAt, q.UpdatedAt = q.CreatedAt.UTC(), q.UpdatedAt.UTC()
		*out = append(*out, &q)
		return nil
	}
}

func scanSession(out *[]*dt.Session) func(rows) error {
	return func(r rows) error {
		var (
			s            dt.Session
			pending      int64
			ready, until pgtype.Timestamptz
			holder       pgtype.Text
		)
		if err := r.Scan(&s.Queue, &s.ID, &s.NextSeq, &pending, &ready, &holder, &s.LockToken, &until, &s.State,
			&s.Closed, &s.Blocked, &s.CreatedAt, &s.UpdatedAt); err != nil {
			return err
		}
		s.Pending = int(pending)
		s.ReadyAt, s.LockedUntil = fromTS(ready), fromTS(until)
		s.LockHolder = holder.String
		s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
		*out = append(*out, &s)
		return nil
	}
}

func scanMessage(out *[]*dt.Message) func(rows) error {
	return func(r rows) error {
		var (
			m             dt.Message
			msgID, reason pgtype.Text
			deadAt        pgtype.Timestamptz
			count         int32
		)
		if err := r.Scan(&m.Queue, &m.SessionID, &m.Seq, &msgID, &m.Body, &count, &m.EndOfSequence, &m.AvailableAt,
			&m.Dead, &reason, &deadAt, &m.EnqueuedAt, &m.TraceContext); err != nil {
			return err
		}
		m.DeliveryCount = int(count)
		m.MessageID, m.DeadReason = msgID.String, reason.String
		m.DeadAt = fromTS(deadAt)
		m.AvailableAt, m.EnqueuedAt = m.AvailableAt.UTC(), m.EnqueuedAt.UTC()
		*out = append(*out, &m)
		return nil
	}
}

// ---- queues ----

func (e *executor) QueuePut(ctx context.Context, params *store.QueuePutParams) error {
	q := params.Queue
	if err := e.write("put queue"); err != nil {
		return err
	}
	_, err := e.exec(ctx, "put queue", e.d.q.queuePut, q.Name, int32(q.MaxDeliveryCount), string(q.PoisonPolicy),
		q.DedupeWindow.Microseconds(), q.LockDuration.Microseconds(), q.CreatedAt, q.UpdatedAt)
	return err
}

func (e *executor) QueueGet(ctx context.Context, params *store.QueueGetParams) (*dt.Queue, error) {
	name := params.Name
	var out []*dt.Queue
	if err := e.each(ctx, "get queue", e.d.q.queueGet, []any{name}, scanQueue(&out)); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("queue %q: %w", name, store.ErrNotFound)
	}
	return out[0], nil
}

func (e *executor) QueueList(ctx context.Context, p *store.QueueListParams) ([]*dt.Queue, error) {
	query, args := e.d.q.queueList, []any{p.AfterName}
	if ns, ok := store.ListNamespace(p.Namespace); ok {
		if ns == "" {
			query += ` AND strpos(name, '/') = 0`
		} else {
			lo, hi := store.NamespaceRange(ns)
			query += ` AND name >= $2 AND name < $3`
			args = append(args, lo, hi)
		}
	}
	query += ` ORDER BY name`
	if p.Limit > 0 {
		args = append(args, p.Limit)
		query += fmt.Sprintf(` LIMIT $%d`, len(args))
	}
	var out []*dt.Queue
	if err := e.each(ctx, "list queues", query, args, scanQueue(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (e *executor) QueueDepth(ctx context.Context, params *store.QueueDepthParams) (store.QueueDepth, error) {
	queue, limit := params.Queue, params.Limit
	var d store.QueueDepth
	var oldest *time.Time
	err := e.each(ctx, "queue depth", e.d.q.queueDepth, []any{queue, limit + 1, limit, params.Now}, func(r rows) error {
		return r.Scan(&d.Sessions, &d.Messages, &oldest)
	})
	if oldest != nil {
		d.OldestWaiting = oldest.UTC()
	}
	return depthCapped(d, limit), err
}

// depthCapped counts a depth read with limit+1 sessions as limit and
// capped, the one over the limit read only to know there were more.
func depthCapped(d store.QueueDepth, limit int) store.QueueDepth {
	if d.Sessions > limit {
		d.Sessions, d.Capped = limit, true
	}
	return d
}

// ---- publish ----

// pubSession is what a publish plans for one session.
type pubSession struct {
	closed     bool // closed before or by this call
	n          int64
	eos        bool
	firstAvail time.Time
}

// MessagePublishMany: tPublishPrepare finds closed sessions and known
// message IDs, without locking, so a rejected call writes nothing;
// tDedupeClaim (only with message IDs) claims the new IDs; tPublish locks or
// creates the sessions, all in one pass in key order, and writes.
func (e *executor) MessagePublishMany(ctx context.Context, p *store.MessagePublishManyParams) ([]store.PublishResult, error) {
	msgs := p.Messages
	res := make([]store.PublishResult, len(msgs))
	if len(msgs) == 0 {
		return res, nil
	}
	if err := e.write("publish"); err != nil {
		return nil, err
	}
	q := e.d.q
	n := len(msgs)
	queues, sids, mids := make([]string, n), make([]string, n), make([]*string, n)
	for i, m := range msgs {
		queues[i], sids[i], mids[i] = m.Queue, m.SessionID, nullStr(m.MessageID)
	}
	var (
		window = make([]int64, n) // dedupe window of the message's queue, µs
		closed = make([]bool, n)
		known  = make([]pgtype.Int8, n) // seq of an unexpired duplicate
	)
	err := e.each(ctx, "publish", q.publishPrepare, []any{queues, sids, mids, p.Now}, func(r rows) error {
		var (
			ord int64
			w   pgtype.Int8
			c   pgtype.Bool
			seq pgtype.Int8
		)
		if err := r.Scan(&ord, &w, &c, &seq); err != nil {
			return err
		}
		i := ord - 1
		window[i] = dt.DefaultDedupeWindow.Microseconds()
		if w.Valid {
			window[i] = w.Int64
		}
		closed[i], known[i] = c.Bool, seq
		return nil
	})
	if err != nil {
		return nil, err
	}

	// Duplicates first (a retried end-of-sequence message is a duplicate,
	// not an error), then the closed check, before anything is written.
	dedupe := func(i int) bool { return msgs[i].MessageID != "" && window[i] > 0 }
	first := map[dedupeKey]int{}
	dupOf := map[int]int{}
	stored := make([]bool, n)
	var claims []int
	for i, m := range msgs {
		if dedupe(i) {
			if known[i].Valid {
				res[i] = store.PublishResult{Seq: known[i].Int64, Duplicate: true}
				continue
			}
			k := dedupeKey{m.Queue, m.MessageID}
			if j, ok := first[k]; ok {
				dupOf[i] = j
				continue
			}
			first[k] = i
			claims = append(claims, i)
		}
		stored[i] = true
	}
	// plan numbers the stored messages within their sessions; it fails if
	// one targets a closed session.
	var (
		sessions map[sessKey]*pubSession
		order    []sessKey
		rank     = make([]int64, n)
	)
	plan := func() error {
		sessions, order = map[sessKey]*pubSession{}, nil
		for i, m := range msgs {
			if !stored[i] {
				continue
			}
			k := sessKey{m.Queue, m.SessionID}
			s := sessions[k]
			if s == nil {
				s = &pubSession{closed: closed[i]}
				sessions[k] = s
				order = append(order, k)
			}
			if s.closed {
				return fmt.Errorf("publish to session %q of queue %q: %w", m.SessionID, m.Queue, store.ErrSessionClosed)
			}
			s.n++
			rank[i] = s.n
			if s.n == 1 {
				s.firstAvail = m.AvailableAt
				if s.firstAvail.IsZero() {
					s.firstAvail = p.Now
				}
			}
			if m.EndOfSequence {
				s.closed, s.eos = true, true
			}
		}
		return nil
	}
	if err := plan(); err != nil {
		return nil, err
	}
	if len(claims) > 0 {
		// A message ID claimed by a transaction that committed since the
		// prepare step looked makes its message a duplicate after all.
		lost, err := e.claimIDs(ctx, msgs, claims, window, p.Now)
		if err != nil {
			return nil, err
		}
		if len(lost) > 0 {
			for i, seq := range lost {
				stored[i] = false
				res[i] = store.PublishResult{Seq: seq, Duplicate: true}
			}
			if err := plan(); err != nil {
				return nil, err
			}
		}
	}
	if len(order) > 0 {
		if err := e.publish(ctx, msgs, stored, rank, claims, sessions, order, p.Now, res); err != nil {
			return nil, err
		}
	}
	for i, j := range dupOf {
		res[i] = store.PublishResult{Seq: res[j].Seq, Duplicate: true}
	}
	return res, nil
}

// claimIDs claims the message IDs of msgs[claims]; it returns the ones
// another transaction claimed first (committed meanwhile) with their seq.
func (e *executor) claimIDs(ctx context.Context, msgs []store.PublishMessage, claims []int, window []int64, now time.Time) (map[int]int64, error) {
	q := e.d.q
	k := len(claims)
	queues, mids, sids, exp := make([]string, k), make([]string, k), make([]string, k), make([]time.Time, k)
	for j, i := range claims {
		m := msgs[i]
		queues[j], mids[j], sids[j] = m.Queue, m.MessageID, m.SessionID
		exp[j] = now.Add(time.Duration(window[i]) * time.Microsecond)
	}
	got := make(map[dedupeKey]bool, k)
	err := e.each(ctx, "publish: claim message IDs", q.dedupeClaim, []any{queues, mids, sids, exp, now}, func(r rows) error {
		var dk dedupeKey
		if err := r.Scan(&dk.queue, &dk.id); err != nil {
			return err
		}
		got[dk] = true
		return nil
	})
	if err != nil || len(got) == k {
		return nil, err
	}
	var lq, lm []string
	lost := map[dedupeKey]int{}
	for _, i := range claims {
		dk := dedupeKey{msgs[i].Queue, msgs[i].MessageID}
		if !got[dk] {
			lost[dk] = i
			lq, lm = append(lq, dk.queue), append(lm, dk.id)
		}
	}
	out := make(map[int]int64, len(lost))
	err = e.each(ctx, "publish: duplicate message IDs", q.dedupeGet, []any{lq, lm}, func(r rows) error {
		var (
			dk  dedupeKey
			seq int64
		)
		if err := r.Scan(&dk.queue, &dk.id, &seq); err != nil {
			return err
		}
		out[lost[dk]] = seq
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) != len(lost) {
		return nil, fmt.Errorf("postgres: publish: %d message IDs neither claimed nor found", len(lost)-len(out))
	}
	return out, nil
}

// publish runs tPublish and fills in the seqs of the stored messages.
func (e *executor) publish(ctx context.Context, msgs []store.PublishMessage, stored []bool, rank []int64, claims []int,
	sessions map[sessKey]*pubSession, order []sessKey, now time.Time, res []store.PublishResult) error {
	ns := len(order)
	gq, gs, gn, geos, gavail := make([]string, ns), make([]string, ns), make([]int64, ns), make([]bool, ns), make([]time.Time, ns)
	for j, k := range order {
		s := sessions[k]
		gq[j], gs[j], gn[j], geos[j], gavail[j] = k.queue, k.id, s.n, s.eos, s.firstAvail
	}
	claimed := make(map[int]bool, len(claims))
	for _, i := range claims {
		claimed[i] = true
	}
	var (
		uq, us     []string
		urank      []int64
		ubody      [][]byte
		ueos, uclm []bool
		uavail     []time.Time
		umids      []*string
		utc        []string
	)
	for i, m := range msgs {
		if !stored[i] {
			continue
		}
		avail := m.AvailableAt
		if avail.IsZero() {
			avail = now
		}
		uq, us, urank = append(uq, m.Queue), append(us, m.SessionID), append(urank, rank[i])
		umids, ubody = append(umids, nullStr(m.MessageID)), append(ubody, nonNil(m.Body))
		ueos, uavail, uclm = append(ueos, m.EndOfSequence), append(uavail, avail), append(uclm, claimed[i])
		utc = append(utc, m.TraceContext)
	}
	next := make(map[sessKey]int64, ns)
	err := e.each(ctx, "publish", e.d.q.publish, []any{gq, gs, gn, geos, gavail, now,
		uq, us, urank, umids, ubody, ueos, uavail, uclm, utc}, func(r rows) error {
		var (
			k   sessKey
			seq int64
		)
		if err := r.Scan(&k.queue, &k.id, &seq); err != nil {
			return err
		}
		next[k] = seq
		return nil
	})
	if err != nil {
		return err
	}
	for i, m := range msgs {
		if !stored[i] {
			continue
		}
		k := sessKey{m.Queue, m.SessionID}
		last, ok := next[k]
		if !ok {
			// Closed by a concurrent transaction after the prepare step
			// looked: the statement wrote the other sessions, so the
			// transaction must be rolled back.
			return fmt.Errorf("publish to session %q of queue %q (closed concurrently; roll the transaction back): %w",
				m.SessionID, m.Queue, store.ErrSessionClosed)
		}
		res[i].Seq = last - sessions[k].n + rank[i]
	}
	return nil
}

// ---- locks ----

func (e *executor) SessionAccept(ctx context.Context, p *store.SessionAcceptParams) ([]*dt.Session, error) {
	if err := e.write("accept sessions"); err != nil {
		return nil, err
	}
	q := e.d.q
	var dur *int64
	if p.LockDuration > 0 {
		v := p.LockDuration.Microseconds()
		dur = &v
	}
	var out []*dt.Session
	if p.SessionID != "" {
		if err := e.each(ctx, "accept session", q.sessionAcceptNamed, []any{p.Holder, p.Now, dur, p.Queue, p.SessionID}, scanSession(&out)); err != nil {
			return nil, err
		}
		if len(out) > 0 {
			return out, nil
		}
		n, err := e.count(ctx, "accept session", q.sessionExists, p.Queue, p.SessionID)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("session %q of queue %q: %w", p.SessionID, p.Queue, store.ErrNotFound)
		}
		return nil, fmt.Errorf("session %q of queue %q: %w", p.SessionID, p.Queue, store.ErrSessionLocked)
	}
	if err := e.each(ctx, "accept sessions", q.sessionAcceptNext, []any{p.Holder, p.Now, dur, p.Queue, p.Limit}, scanSession(&out)); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		// ReadyAt is the head's; nil (nothing pending: a session taken over
		// after a lock expiry, see tSessionAcceptNamed) sorts last.
		if a.ReadyAt == nil || b.ReadyAt == nil {
			if (a.ReadyAt == nil) != (b.ReadyAt == nil) {
				return b.ReadyAt == nil
			}
		} else if !a.ReadyAt.Equal(*b.ReadyAt) {
			return a.ReadyAt.Before(*b.ReadyAt)
		}
		return a.ID < b.ID
	})
	return out, nil
}

func (e *executor) SessionAvailable(ctx context.Context, params *store.SessionAvailableParams) (bool, error) {
	queue, now := params.Queue, params.Now
	var ok bool
	err := e.each(ctx, "sessions available", e.d.q.sessionAvailable, []any{queue, now}, func(rs rows) error {
		return rs.Scan(&ok)
	})
	return ok, err
}

// SessionNextReady implements store.QueueExecutor. It reads as indexed
// does (on the Reader, a short transaction of its own: two round trips,
// once per idle wake-up): a walk of queue_sessions_ready in ready-time
// order stops at the first session no lock holds back, where a planner
// without statistics may sort every pending session of the queue instead.
func (e *executor) SessionNextReady(ctx context.Context, params *store.SessionNextReadyParams) (time.Time, error) {
	var next *time.Time
	err := e.indexed(ctx, func(x *executor) error {
		return x.each(ctx, "next ready session", e.d.q.sessionNextReady, []any{params.Queue}, func(rs rows) error {
			return rs.Scan(&next)
		})
	})
	if err != nil || next == nil {
		return time.Time{}, err
	}
	return next.UTC(), nil
}

// lockUpdate runs a lock statement (renew, release) round by round; a ref
// whose ord the statement did not return lost its lock. With lockFirst,
// tSettleLock locks the held sessions before, in the same pipeline.
func (e *executor) lockUpdate(ctx context.Context, what, query string, lockFirst bool, refs []store.SessionRef, extra ...any) ([]error, error) {
	if err := e.write(what); err != nil {
		return nil, err
	}
	errs := make([]error, len(refs))
	for _, round := range refRounds(refs) {
		queues, ids, tokens := refArrays(refs, round)
		if lockFirst {
			if err := e.later(ctx, what+": lock sessions", e.d.q.settleLock, []any{queues, ids, tokens, extra[0]}, nil, nil); err != nil {
				return nil, err
			}
		}
		done := make([]bool, len(round))
		err := e.each(ctx, what, query, append([]any{queues, ids, tokens}, extra...), func(r rows) error {
			var ord int64
			if err := r.Scan(&ord); err != nil {
				return err
			}
			done[ord-1] = true
			return nil
		})
		if err != nil {
			return nil, err
		}
		for j, i := range round {
			if !done[j] {
				errs[i] = store.ErrLockLost
			}
		}
	}
	return errs, nil
}

func (e *executor) SessionRenew(ctx context.Context, params *store.SessionRenewParams) ([]error, error) {
	refs, now, until := params.Refs, params.Now, params.Until
	return e.lockUpdate(ctx, "renew sessions", e.d.q.sessionRenew, false, refs, now, until)
}

// SessionRelease locks the held sessions first (tSettleLock, pipelined with
// tSessionRelease: one round trip), so that the ready_at the release
// computes sees every message published to them.
func (e *executor) SessionRelease(ctx context.Context, params *store.SessionReleaseParams) ([]error, error) {
	refs, now := params.Refs, params.Now
	return e.lockUpdate(ctx, "release sessions", e.d.q.sessionRelease, true, refs, now)
}

// ---- receive and settle ----

func (e *executor) MessageReceiveMany(ctx context.Context, params *store.MessageReceiveManyParams) ([]*dt.Message, []error, error) {
	refs, now := params.Refs, params.Now
	if err := e.write("receive"); err != nil {
		return nil, nil, err
	}
	msgs := make([]*dt.Message, len(refs))
	errs := make([]error, len(refs))
	for _, round := range refRounds(refs) {
		queues, ids, tokens := refArrays(refs, round)
		held := make([]bool, len(round))
		err := e.each(ctx, "receive", e.d.q.receive, []any{queues, ids, tokens, now}, func(r rows) error {
			var (
				ord            int64
				seq            pgtype.Int8
				msgID, tc      pgtype.Text
				body           []byte
				count          pgtype.Int4
				eos            pgtype.Bool
				avail, enqueue pgtype.Timestamptz
			)
			if err := r.Scan(&ord, &seq, &msgID, &body, &count, &eos, &avail, &enqueue, &tc); err != nil {
				return err
			}
			j := ord - 1
			held[j] = true
			if seq.Valid {
				ref := refs[round[j]]
				msgs[round[j]] = &dt.Message{Queue: ref.Queue, SessionID: ref.SessionID, Seq: seq.Int64,
					MessageID: msgID.String, Body: body, DeliveryCount: int(count.Int32), EndOfSequence: eos.Bool,
					AvailableAt: avail.Time.UTC(), EnqueuedAt: enqueue.Time.UTC(), TraceContext: tc.String}
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		for j, i := range round {
			if !held[j] {
				errs[i] = store.ErrLockLost
			}
		}
	}
	return msgs, errs, nil
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

// settle runs MessageSettleMany and, with receive, MessageSettleReceiveMany:
// per round, tSettleLock locks the held sessions and tSettle (a fresh
// snapshot, once they are locked) applies the settles of head messages and
// receives the next heads. The two go out in one pipeline: one round trip.
func (e *executor) settle(ctx context.Context, settles []store.MessageSettle, now time.Time, receive bool) ([]*dt.Message, []error, error) {
	if err := e.write("settle"); err != nil {
		return nil, nil, err
	}
	for _, s := range settles {
		switch s.Action {
		case store.SettleComplete, store.SettleAbandon, store.SettleDeadLetter:
		default:
			return nil, nil, fmt.Errorf("postgres: settle: unknown action %q", s.Action)
		}
	}
	q := e.d.q
	var msgs []*dt.Message
	if receive {
		msgs = make([]*dt.Message, len(settles))
	}
	errs := make([]error, len(settles))
	refs := make([]store.SessionRef, len(settles))
	for i, s := range settles {
		refs[i] = s.Ref
	}
	for _, round := range refRounds(refs) {
		queues, ids, tokens := refArrays(refs, round)
		if err := e.later(ctx, "settle: lock sessions", q.settleLock, []any{queues, ids, tokens, now}, nil, nil); err != nil {
			return nil, nil, err
		}
		n := len(round)
		var (
			seqs          = make([]int64, n)
			actions       = make([]string, n)
			avails        = make([]time.Time, n)
			reasons       = make([]*string, n)
			blocks, sets  = make([]bool, n), make([]bool, n)
			states        = make([][]byte, n)
			recvs         = make([]bool, n)
			held, applied = make([]bool, n), make([]bool, n)
		)
		for j, i := range round {
			s := settles[i]
			avail := s.AvailableAt
			if avail.IsZero() {
				avail = now
			}
			seqs[j], actions[j], avails[j], reasons[j] = s.Seq, string(s.Action), avail, nullStr(s.Reason)
			blocks[j], sets[j], states[j], recvs[j] = s.Block, s.SetState, s.State, receive && s.ReceiveNext
		}
		err := e.each(ctx, "settle", q.settle, []any{queues, ids, tokens, seqs, actions, avails, reasons, blocks, sets,
			states, recvs, now}, func(r rows) error {
			var (
				ord            int64
				ok             pgtype.Bool
				seq            pgtype.Int8
				msgID, tc      pgtype.Text
				body           []byte
				count          pgtype.Int4
				eos            pgtype.Bool
				avail, enqueue pgtype.Timestamptz
			)
			if err := r.Scan(&ord, &ok, &seq, &msgID, &body, &count, &eos, &avail, &enqueue, &tc); err != nil {
				return err
			}
			j := ord - 1
			if !seq.Valid {
				held[j], applied[j] = true, ok.Bool
				return nil
			}
			if msgs == nil {
				return fmt.Errorf("message %d received without ReceiveNext", seq.Int64)
			}
			ref := refs[round[j]]
			msgs[round[j]] = &dt.Message{Queue: ref.Queue, SessionID: ref.SessionID, Seq: seq.Int64,
				MessageID: msgID.String, Body: body, DeliveryCount: int(count.Int32), EndOfSequence: eos.Bool,
				AvailableAt: avail.Time.UTC(), EnqueuedAt: enqueue.Time.UTC(), TraceContext: tc.String}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		for j, i := range round {
			switch {
			case !held[j]:
				errs[i] = store.ErrLockLost
			case !applied[j]:
				errs[i] = store.ErrNotHead
			}
		}
	}
	return msgs, errs, nil
}

// ---- sessions ----

func (e *executor) SessionGet(ctx context.Context, params *store.SessionGetParams) (*dt.Session, error) {
	queue, sessionID := params.Queue, params.SessionID
	q := e.d.q
	var out []*dt.Session
	if err := e.each(ctx, "get session", e.pick(q.sessionGet, q.sessionGetLock), []any{queue, sessionID}, scanSession(&out)); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("session %q of queue %q: %w", sessionID, queue, store.ErrNotFound)
	}
	return out[0], nil
}

func (e *executor) SessionList(ctx context.Context, p *store.SessionListParams) ([]*dt.Session, error) {
	query, args := e.d.q.sessionList, []any{p.Queue, p.AfterID}
	if p.Limit > 0 {
		query += ` LIMIT $3`
		args = append(args, p.Limit)
	}
	var out []*dt.Session
	if err := e.each(ctx, "list sessions", query, args, scanSession(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (e *executor) SessionStateSet(ctx context.Context, params *store.SessionStateSetParams) error {
	ref, state, now := params.Ref, params.State, params.Now
	if err := e.write("set session state"); err != nil {
		return err
	}
	n, err := e.exec(ctx, "set session state", e.d.q.sessionStateSet, state, now, ref.Queue, ref.SessionID, ref.Token)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("session %q of queue %q: %w", ref.SessionID, ref.Queue, store.ErrLockLost)
	}
	return nil
}

// ---- messages and the dead-letter list ----

func (e *executor) MessagePeek(ctx context.Context, p *store.MessagePeekParams) ([]*dt.Message, error) {
	query, args := e.d.q.messagePeek, []any{p.Queue, p.SessionID, p.FromSeq}
	if p.Limit > 0 {
		query += ` LIMIT $4`
		args = append(args, p.Limit)
	}
	var out []*dt.Message
	if err := e.each(ctx, "peek messages", query, args, scanMessage(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (e *executor) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*dt.Message, error) {
	var b strings.Builder
	b.WriteString(e.d.q.deadLetterList)
	args := []any{p.Queue, p.AfterSessionID, p.AfterSeq}
	if p.SessionID != "" {
		args = append(args, p.SessionID)
		fmt.Fprintf(&b, ` AND session_id = $%d`, len(args))
	}
	b.WriteString(` ORDER BY session_id, seq`)
	if p.Limit > 0 {
		args = append(args, p.Limit)
		fmt.Fprintf(&b, ` LIMIT $%d`, len(args))
	}
	var out []*dt.Message
	if err := e.each(ctx, "list dead letters", b.String(), args, scanMessage(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

func (e *executor) deadLetterOp(ctx context.Context, what, query string, queue, sessionID string, seq int64, now time.Time, lock bool) error {
	if err := e.write(what); err != nil {
		return err
	}
	if lock {
		if _, err := e.exec(ctx, what, e.d.q.sessionLock, queue, sessionID); err != nil {
			return err
		}
	}
	n, err := e.count(ctx, what, query, queue, sessionID, seq, now)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("dead message %d of session %q of queue %q: %w", seq, sessionID, queue, store.ErrNotFound)
	}
	return nil
}

func (e *executor) DeadLetterResubmit(ctx context.Context, params *store.DeadLetterResubmitParams) error {
	queue, sessionID, seq, now := params.Queue, params.SessionID, params.Seq, params.Now
	return e.deadLetterOp(ctx, "resubmit dead letter", e.d.q.resubmit, queue, sessionID, seq, now, true)
}

func (e *executor) DeadLetterDiscard(ctx context.Context, params *store.DeadLetterDiscardParams) error {
	queue, sessionID, seq, now := params.Queue, params.SessionID, params.Seq, params.Now
	return e.deadLetterOp(ctx, "discard dead letter", e.d.q.discard, queue, sessionID, seq, now, false)
}

func (e *executor) DedupeDeleteExpired(ctx context.Context, params *store.DedupeDeleteExpiredParams) (int, error) {
	now, limit := params.Now, params.Limit
	if err := e.write("delete expired message IDs"); err != nil {
		return 0, err
	}
	n, err := e.exec(ctx, "delete expired message IDs", e.d.q.dedupeDeleteExpired, now, limit)
	return int(n), err
}
