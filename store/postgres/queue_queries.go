package postgres

// The SQL of the session-queue primitives (store.QueueExecutor), with the
// schema placeholder {s}; newQueries (queries.go) fills it in with the
// other statements. Batches travel as arrays (unnest), one or two statements
// per call whatever its size.
//
// Locking: every statement that changes sessions first locks their rows in
// (queue, session_id) order (SELECT … ORDER BY … FOR UPDATE), so transactions
// touching several sessions never wait on each other in a cycle; accept-next
// skips locked rows instead (SKIP LOCKED). A statement that computes a new
// head from queue_messages runs after the statement that locked the session,
// so its snapshot already holds every message committed to that session (a
// statement's snapshot is taken when it starts, before any lock it waits
// for). Settles send the two in one pipeline: one round trip.

const (
	sqQueueCols = `name, max_delivery_count, poison_policy, dedupe_window_us, lock_duration_us, created_at, updated_at`

	// sqSessionCols are the columns of a Session read from queue_sessions qs.
	// ReadyAt is computed from the head, not read from the ready_at column:
	// that column is exact only while the session is not held (see
	// tSettle).
	sqSessionCols = `qs.queue, qs.session_id, qs.next_seq, qs.pending, ` + sqHeadAvail + `, qs.lock_holder, qs.lock_token,
 qs.locked_until, qs.state, qs.closed, qs.blocked, qs.created_at, qs.updated_at`

	// sqHeadAvail is the available time of the head of session qs (NULL:
	// nothing pending): what ready_at is when the session is not held.
	//
	// Every lookup of a session's head starts at its head_seq, a lower
	// bound of the seq of its messages not dead (migration 0006): the scan
	// of the primary key (queue, session_id, seq) then begins past the
	// entries of the messages completed or dead-lettered before, which
	// stay in the index until VACUUM (completed) or for good (dead). The
	// bound only moves under the session's row lock: tSettle raises it to
	// seq + 1 on a complete or dead-letter of the head seq, tResubmit
	// lowers it to the seq it makes not dead again; publish appends seqs
	// above every seq so far.
	sqHeadAvail = `(SELECT m.available_at FROM {s}.queue_messages m
   WHERE m.queue = qs.queue AND m.session_id = qs.session_id AND m.seq >= qs.head_seq AND NOT m.dead
   ORDER BY m.seq LIMIT 1)`

	sqMessageCols = `queue, session_id, seq, message_id, body, delivery_count, end_of_sequence, available_at,
 dead, dead_reason, dead_at, enqueued_at, trace_context`

	// sqHeld is the condition of a call under a lock (session qs, ref u,
	// now $4): the token is current and the lock unexpired.
	sqHeld = `qs.lock_token = u.token AND qs.lock_holder IS NOT NULL AND qs.locked_until > $4`

	// sqRefs unnests session refs ($1 queues, $2 session IDs, $3 tokens).
	sqRefs = `u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(queue, session_id, token, ord))`

	// sqLockHeld locks the held sessions among the refs, in key order.
	sqLockHeld = `SELECT qs.queue, qs.session_id, qs.blocked, qs.head_seq, u.ord
   FROM {s}.queue_sessions qs JOIN u ON qs.queue = u.queue AND qs.session_id = u.session_id
   WHERE ` + sqHeld + `
   ORDER BY qs.queue, qs.session_id
   FOR UPDATE OF qs`

	tQueuePut = `INSERT INTO {s}.queues (` + sqQueueCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7)
 ON CONFLICT (name) DO UPDATE SET max_delivery_count = EXCLUDED.max_delivery_count,
   poison_policy = EXCLUDED.poison_policy, dedupe_window_us = EXCLUDED.dedupe_window_us,
   lock_duration_us = EXCLUDED.lock_duration_us, updated_at = EXCLUDED.updated_at`
	tQueueGet = `SELECT ` + sqQueueCols + ` FROM {s}.queues WHERE name = $1`
	// tQueueDepth reads at most $2 sessions through queue_sessions_ready
	// and sums the pending messages of the first $3.
	// The earliest ready_at ($4: now) of the first $3 not held is the
	// oldest wait for a consumer.
	tQueueDepth = `SELECT count(*), coalesce(sum(CASE WHEN n <= $3 THEN pending ELSE 0 END), 0),
   min(CASE WHEN n <= $3 AND ready_at <= $4 AND (lock_holder IS NULL OR locked_until <= $4) THEN ready_at END)
 FROM (SELECT pending, ready_at, lock_holder, locked_until, row_number() OVER (ORDER BY ready_at) AS n
   FROM {s}.queue_sessions
   WHERE queue = $1 AND ready_at IS NOT NULL AND NOT blocked ORDER BY ready_at LIMIT $2) AS s`
	tQueueList = `SELECT ` + sqQueueCols + ` FROM {s}.queues WHERE name > $1`

	// tPublishPrepare returns, per message ($1 queues, $2 session IDs, $3
	// message IDs): its queue's dedupe window (NULL: no queue yet), whether
	// its session is closed (NULL: no session yet) and the seq of an
	// unexpired message with the same ID. It locks nothing: tPublish locks
	// (or creates) every session of the call in one pass in key order, so
	// calls racing over sessions, new or not, never wait on each other in a
	// cycle. (Locking the existing sessions here and creating the others in
	// tPublish would take them out of key order: two calls could then each
	// hold a session the other waits for.) A session closed after this read
	// is caught by tPublish.
	tPublishPrepare = `WITH u AS (
   SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(queue, session_id, message_id, ord))
 SELECT u.ord, q.dedupe_window_us, qs.closed, d.seq
 FROM u
 LEFT JOIN {s}.queues q ON q.name = u.queue
 LEFT JOIN {s}.queue_sessions qs ON qs.queue = u.queue AND qs.session_id = u.session_id
 LEFT JOIN {s}.queue_dedupe d ON d.queue = u.queue AND d.message_id = u.message_id AND d.expires_at > $4`

	// tDedupeClaim claims message IDs (free, or expired at $5); the seq is
	// filled in by tPublish. An ID another transaction holds uncommitted
	// waits for it; the IDs not returned are duplicates after all.
	tDedupeClaim = `INSERT INTO {s}.queue_dedupe AS d (queue, message_id, session_id, seq, expires_at)
 SELECT queue, message_id, session_id, 0, expires_at
 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS u(queue, message_id, session_id, expires_at)
 ORDER BY queue, message_id
 ON CONFLICT (queue, message_id) DO UPDATE SET session_id = EXCLUDED.session_id, seq = 0, expires_at = EXCLUDED.expires_at
 WHERE d.expires_at <= $5
 RETURNING queue, message_id`
	tDedupeGet = `SELECT d.queue, d.message_id, d.seq
 FROM {s}.queue_dedupe d JOIN unnest($1::text[], $2::text[]) AS u(queue, message_id)
   ON d.queue = u.queue AND d.message_id = u.message_id`

	// tPublish creates missing queues, creates or advances the sessions
	// (g: $1..$5, one row per session: messages added, end of sequence, the
	// available time of the first) holding their rows to commit, inserts the
	// messages (u: $7..$14, rank = position within the session in this call)
	// with seq = the session's previous next_seq + rank, and records the seq
	// of claimed message IDs. A session found closed is left out of s (and
	// its messages with it); the caller sees it missing.
	tPublish = `WITH g AS (
   SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bool[], $5::timestamptz[])
     AS g(queue, session_id, n, eos, first_avail)),
 qi AS (
   INSERT INTO {s}.queues (name, created_at, updated_at)
   SELECT DISTINCT queue, $6::timestamptz, $6::timestamptz FROM g ORDER BY 1
   ON CONFLICT (name) DO NOTHING),
 s AS (
   INSERT INTO {s}.queue_sessions AS qs (queue, session_id, next_seq, pending, ready_at, closed, created_at, updated_at)
   SELECT queue, session_id, n, n, first_avail, eos, $6::timestamptz, $6::timestamptz FROM g ORDER BY queue, session_id
   ON CONFLICT (queue, session_id) DO UPDATE SET next_seq = qs.next_seq + EXCLUDED.next_seq,
     pending = qs.pending + EXCLUDED.pending,
     ready_at = COALESCE(qs.ready_at, CASE WHEN qs.lock_holder IS NULL THEN EXCLUDED.ready_at
       ELSE LEAST(EXCLUDED.ready_at, $6::timestamptz) END),
     closed = EXCLUDED.closed, updated_at = EXCLUDED.updated_at
   WHERE NOT qs.closed
   RETURNING qs.queue, qs.session_id, qs.next_seq),
 x AS (
   SELECT u.queue, u.session_id, u.message_id, u.body, u.eos, u.avail, u.claimed, u.tc, s.next_seq - g.n + u.rank AS seq
   FROM unnest($7::text[], $8::text[], $9::bigint[], $10::text[], $11::bytea[], $12::bool[], $13::timestamptz[], $14::bool[],
     $15::text[]) AS u(queue, session_id, rank, message_id, body, eos, avail, claimed, tc)
   JOIN s ON s.queue = u.queue AND s.session_id = u.session_id
   JOIN g ON g.queue = u.queue AND g.session_id = u.session_id),
 m AS (
   INSERT INTO {s}.queue_messages (queue, session_id, seq, message_id, body, delivery_count, end_of_sequence,
     available_at, dead, enqueued_at, trace_context)
   SELECT queue, session_id, seq, message_id, body, 0, eos, avail, false, $6::timestamptz, tc
   FROM x ORDER BY queue, session_id, seq),
 dd AS (
   UPDATE {s}.queue_dedupe AS d SET session_id = x.session_id, seq = x.seq
   FROM x WHERE x.claimed AND d.queue = x.queue AND d.message_id = x.message_id)
 SELECT queue, session_id, next_seq FROM s`

	// The lock duration: the caller's ($3, NULL when not given), else the
	// queue's, else the default.
	sqLockUntil = `$2 + COALESCE($3::bigint, (SELECT lock_duration_us FROM {s}.queues WHERE name = $4), 30000000)
     * interval '1 microsecond'`

	// Accepting caps ready_at at now: while a session is held its ready_at
	// is not kept up to date (see tSettle), but it is never later than when
	// the session had something ready, so once the lock expires accept-next
	// finds the session again whatever happened to it meanwhile.
	// Accept-next only takes sessions with ready_at <= now: there it changes
	// nothing.
	tSessionAcceptNamed = `UPDATE {s}.queue_sessions AS qs SET lock_holder = $1, lock_token = qs.lock_token + 1,
   locked_until = ` + sqLockUntil + `, ready_at = CASE WHEN qs.ready_at > $2 THEN $2 ELSE qs.ready_at END,
   updated_at = $2
 WHERE qs.queue = $4 AND qs.session_id = $5 AND (qs.lock_holder IS NULL OR qs.locked_until <= $2)
 RETURNING ` + sqSessionCols
	// sqSessionReady: the session's head is available at $2, it is not
	// blocked, and nobody holds it.
	sqSessionReady = `ready_at IS NOT NULL AND NOT blocked AND ready_at <= $2
     AND (lock_holder IS NULL OR locked_until <= $2)`
	tSessionAvailable = `SELECT EXISTS (SELECT 1 FROM {s}.queue_sessions WHERE queue = $1 AND ` + sqSessionReady + `)`
	// tSessionNextReady walks queue_sessions_ready to the first pending
	// session whose head no lock holds back (u), then takes the earliest
	// lock end among the held sessions before it: a session after u cannot
	// be accepted before u, nor a held one of u's ready time (its lock ends
	// after that). So an idle consumer's read costs the held sessions,
	// however many wait for a later time.
	tSessionNextReady = `WITH u AS (
   SELECT ready_at FROM {s}.queue_sessions
   WHERE queue = $1 AND ready_at IS NOT NULL AND NOT blocked AND (lock_holder IS NULL OR locked_until <= ready_at)
   ORDER BY ready_at, session_id LIMIT 1)
 SELECT least((SELECT ready_at FROM u),
   (SELECT min(locked_until) FROM {s}.queue_sessions
    WHERE queue = $1 AND ready_at IS NOT NULL AND NOT blocked AND lock_holder IS NOT NULL AND locked_until > ready_at
      AND ready_at < coalesce((SELECT ready_at FROM u), 'infinity')))`
	tSessionAcceptNext = `WITH c AS MATERIALIZED (
   SELECT queue, session_id FROM {s}.queue_sessions
   WHERE queue = $4 AND ` + sqSessionReady + `
   ORDER BY ready_at, session_id LIMIT $5
   FOR UPDATE SKIP LOCKED)
 UPDATE {s}.queue_sessions AS qs SET lock_holder = $1, lock_token = qs.lock_token + 1,
   locked_until = ` + sqLockUntil + `, updated_at = $2
 FROM c WHERE qs.queue = c.queue AND qs.session_id = c.session_id
 RETURNING ` + sqSessionCols
	tSessionExists = `SELECT count(*) FROM {s}.queue_sessions WHERE queue = $1 AND session_id = $2`

	tSessionRenew = `WITH ` + sqRefs + `,
 lk AS MATERIALIZED (` + sqLockHeld + `)
 UPDATE {s}.queue_sessions AS qs SET locked_until = $5, updated_at = $4
 FROM lk WHERE qs.queue = lk.queue AND qs.session_id = lk.session_id
 RETURNING lk.ord`
	// tSessionRelease runs after tSettleLock (pipelined, as for a settle):
	// the head it computes then includes every message committed to the
	// session. It brings ready_at up to date, the session no longer held.
	tSessionRelease = `WITH ` + sqRefs + `,
 lk AS MATERIALIZED (` + sqLockHeld + `)
 UPDATE {s}.queue_sessions AS qs SET lock_holder = NULL, locked_until = NULL, ready_at = ` + sqHeadAvail + `,
   updated_at = $4
 FROM lk WHERE qs.queue = lk.queue AND qs.session_id = lk.session_id
 RETURNING lk.ord`

	// tReceive locks the held sessions and delivers the head of those not
	// blocked, if available at $4. It returns a row per held ref with NULL
	// message columns, and a row per delivered message (no join: the
	// planner cannot estimate CTE sizes, and a nested loop over two of them
	// is quadratic).
	tReceive = `WITH ` + sqRefs + `,
 lk AS MATERIALIZED (` + sqLockHeld + `),
 h AS MATERIALIZED (
   SELECT lk.ord, lk.queue, lk.session_id,
     (SELECT m.seq FROM {s}.queue_messages m WHERE m.queue = lk.queue AND m.session_id = lk.session_id
        AND m.seq >= lk.head_seq AND NOT m.dead
      ORDER BY m.seq LIMIT 1) AS seq
   FROM lk WHERE NOT lk.blocked),
 r AS (
   UPDATE {s}.queue_messages AS m SET delivery_count = m.delivery_count + 1
   FROM h WHERE m.queue = h.queue AND m.session_id = h.session_id AND m.seq = h.seq AND m.available_at <= $4
   RETURNING h.ord, m.seq, m.message_id, m.body, m.delivery_count, m.end_of_sequence, m.available_at, m.enqueued_at,
     m.trace_context)
 SELECT lk.ord, NULL::bigint, NULL::text, NULL::bytea, NULL::integer, NULL::boolean, NULL::timestamptz, NULL::timestamptz,
   NULL::text
 FROM lk
 UNION ALL
 SELECT ord, seq, message_id, body, delivery_count, end_of_sequence, available_at, enqueued_at, trace_context FROM r`

	// tSettleLock locks the held sessions of a settle. It is pipelined
	// with tSettle, which runs in a fresh snapshot once the rows are locked
	// (its head and next-message reads then see every message committed to
	// those sessions).
	tSettleLock = `WITH ` + sqRefs + `
 ` + sqLockHeld

	// tSettle settles heads and, for the settles with recv, receives the
	// session's head the settle leaves, in one statement. h: the refs
	// whose lock is held, with the session's first two messages not dead
	// (one index scan); ok: those whose seq is the first, the head
	// (applied), with the next message after it, and take: whether
	// the head left is to be received (recv, and the session is not
	// blocked, nor blocked by this dead-letter). An abandoned message stays
	// the head and is received again in the same UPDATE (upd) if its new
	// time has come (one statement must not change a row twice); after a
	// complete or dead-letter, r receives the next message if available. It
	// returns a row per held ref (ord, applied, NULL message) and a row per
	// received message (ord, NULL, message); as in tReceive, no join of the
	// CTEs.
	//
	// ss raises head_seq (see sqHeadAvail) past a completed or dead-lettered
	// head. It changes no indexed column of queue_sessions, but for ready_at to
	// NULL when the session has nothing pending left and blocked on a
	// dead-letter that blocks: the session's row is otherwise updated HOT
	// (no new index entries, dead versions pruned within the page without
	// VACUUM). So the ready_at of a held session is NULL exactly when it has
	// nothing pending, but its value is stale: what accept or the publish to
	// the empty session left (never later than when that head became
	// available, nor than that accept or publish), possibly earlier than
	// the current head's. SessionRelease recomputes it.
	tSettle = `WITH u AS (
   SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::timestamptz[], $7::text[],
     $8::bool[], $9::bool[], $10::bytea[], $11::bool[])
     WITH ORDINALITY AS u(queue, session_id, token, seq, action, avail, reason, block, set_state, state, recv, ord)),
 h AS MATERIALIZED (
   SELECT u.*, qs.blocked AS was_blocked, hd.seqs[1] AS head, hd.seqs[2] AS second, hd.avails[2] AS second_avail
   FROM u JOIN {s}.queue_sessions qs ON qs.queue = u.queue AND qs.session_id = u.session_id
   CROSS JOIN LATERAL (
     SELECT array_agg(m.seq ORDER BY m.seq) AS seqs, array_agg(m.available_at ORDER BY m.seq) AS avails
     FROM (SELECT m.seq, m.available_at FROM {s}.queue_messages m
       WHERE m.queue = u.queue AND m.session_id = u.session_id AND m.seq >= qs.head_seq AND NOT m.dead
       ORDER BY m.seq LIMIT 2) m) hd
   WHERE qs.lock_token = u.token AND qs.lock_holder IS NOT NULL AND qs.locked_until > $12),
 ok AS MATERIALIZED (
   SELECT h.*, CASE WHEN h.action <> 'abandon' THEN h.second END AS next_seq,
     CASE WHEN h.action <> 'abandon' THEN h.second_avail END AS next_avail,
     h.recv AND NOT h.was_blocked AND NOT (h.action = 'dead_letter' AND h.block) AS take
   FROM h WHERE h.seq = h.head),
 del AS (
   DELETE FROM {s}.queue_messages AS m USING ok
   WHERE ok.action = 'complete' AND m.queue = ok.queue AND m.session_id = ok.session_id AND m.seq = ok.seq),
 upd AS (
   UPDATE {s}.queue_messages AS m SET
     available_at = CASE WHEN ok.action = 'abandon' THEN ok.avail ELSE m.available_at END,
     dead = ok.action = 'dead_letter',
     dead_reason = CASE WHEN ok.action = 'dead_letter' THEN ok.reason ELSE m.dead_reason END,
     dead_at = CASE WHEN ok.action = 'dead_letter' THEN $12::timestamptz ELSE m.dead_at END,
     delivery_count = m.delivery_count + CASE WHEN ok.action = 'abandon' AND ok.take AND ok.avail <= $12 THEN 1 ELSE 0 END
   FROM ok WHERE ok.action <> 'complete' AND m.queue = ok.queue AND m.session_id = ok.session_id AND m.seq = ok.seq
   RETURNING ok.ord, ok.action = 'abandon' AND ok.take AND ok.avail <= $12 AS taken, m.seq, m.message_id, m.body,
     m.delivery_count, m.end_of_sequence, m.available_at, m.enqueued_at,
     m.trace_context),
 ss AS (
   UPDATE {s}.queue_sessions AS qs SET
     pending = qs.pending - CASE WHEN ok.action = 'abandon' THEN 0 ELSE 1 END,
     head_seq = CASE WHEN ok.action = 'abandon' THEN qs.head_seq ELSE ok.seq + 1 END,
     ready_at = CASE WHEN ok.action <> 'abandon' AND ok.next_seq IS NULL THEN NULL ELSE qs.ready_at END,
     blocked = qs.blocked OR (ok.action = 'dead_letter' AND ok.block),
     state = CASE WHEN ok.set_state THEN ok.state ELSE qs.state END,
     updated_at = $12::timestamptz
   FROM ok WHERE qs.queue = ok.queue AND qs.session_id = ok.session_id),
 r AS (
   UPDATE {s}.queue_messages AS m SET delivery_count = m.delivery_count + 1
   FROM ok WHERE ok.take AND ok.action <> 'abandon' AND ok.next_avail <= $12
     AND m.queue = ok.queue AND m.session_id = ok.session_id AND m.seq = ok.next_seq
   RETURNING ok.ord, m.seq, m.message_id, m.body, m.delivery_count, m.end_of_sequence, m.available_at, m.enqueued_at,
     m.trace_context)
 SELECT h.ord, h.seq = h.head, NULL::bigint, NULL::text, NULL::bytea, NULL::integer, NULL::boolean, NULL::timestamptz,
   NULL::timestamptz, NULL::text
 FROM h
 UNION ALL
 SELECT ord, NULL, seq, message_id, body, delivery_count, end_of_sequence, available_at, enqueued_at, trace_context FROM r
 UNION ALL
 SELECT ord, NULL, seq, message_id, body, delivery_count, end_of_sequence, available_at, enqueued_at, trace_context FROM upd WHERE taken`

	tSessionGet      = `SELECT ` + sqSessionCols + ` FROM {s}.queue_sessions qs WHERE qs.queue = $1 AND qs.session_id = $2`
	tSessionGetLock  = tSessionGet + ` FOR UPDATE OF qs`
	tSessionList     = `SELECT ` + sqSessionCols + ` FROM {s}.queue_sessions qs WHERE qs.queue = $1 AND qs.session_id > $2 ORDER BY qs.session_id`
	tSessionStateSet = `UPDATE {s}.queue_sessions SET state = $1, updated_at = $2
 WHERE queue = $3 AND session_id = $4 AND lock_token = $5 AND lock_holder IS NOT NULL AND locked_until > $2`

	tMessagePeek    = `SELECT ` + sqMessageCols + ` FROM {s}.queue_messages WHERE queue = $1 AND session_id = $2 AND seq >= $3 ORDER BY seq`
	tDeadLetterList = `SELECT ` + sqMessageCols + ` FROM {s}.queue_messages
 WHERE queue = $1 AND dead AND (session_id, seq) > ($2::text, $3::bigint)`

	tSessionLock = `SELECT 1 FROM {s}.queue_sessions WHERE queue = $1 AND session_id = $2 FOR UPDATE`
	// tResubmit runs after tSessionLock: the head it computes is current.
	// A held session keeps its ready_at if set (see tSettle; release
	// recomputes it), else gets $4.
	tResubmit = `WITH r AS (
   UPDATE {s}.queue_messages SET dead = false, dead_reason = NULL, dead_at = NULL, delivery_count = 0, available_at = $4
   WHERE queue = $1 AND session_id = $2 AND seq = $3 AND dead
   RETURNING seq),
 hd AS (SELECT min(m.seq) AS seq FROM {s}.queue_messages m WHERE m.queue = $1 AND m.session_id = $2 AND NOT m.dead
   AND m.seq >= (SELECT head_seq FROM {s}.queue_sessions WHERE queue = $1 AND session_id = $2)),
 ss AS (
   UPDATE {s}.queue_sessions AS qs SET pending = qs.pending + 1, blocked = false, head_seq = LEAST(qs.head_seq, r.seq),
     ready_at = CASE WHEN qs.lock_holder IS NOT NULL THEN COALESCE(qs.ready_at, $4)
       WHEN hd.seq IS NULL OR r.seq < hd.seq THEN $4 ELSE qs.ready_at END,
     updated_at = $4
   FROM r, hd WHERE qs.queue = $1 AND qs.session_id = $2)
 SELECT count(*) FROM r`
	tDiscard = `WITH d AS (
   DELETE FROM {s}.queue_messages WHERE queue = $1 AND session_id = $2 AND seq = $3 AND dead RETURNING seq),
 ss AS (
   UPDATE {s}.queue_sessions SET blocked = false, updated_at = $4
   WHERE queue = $1 AND session_id = $2 AND EXISTS (SELECT 1 FROM d))
 SELECT count(*) FROM d`

	tDedupeDeleteExpired = `WITH c AS MATERIALIZED (
   SELECT queue, message_id FROM {s}.queue_dedupe WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2
   FOR UPDATE SKIP LOCKED)
 DELETE FROM {s}.queue_dedupe AS d USING c WHERE d.queue = c.queue AND d.message_id = c.message_id`
)
