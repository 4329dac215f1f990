package sqlite

// The SQL of the session-queue primitives (store.QueueExecutor). Every
// statement here is prepared with the driver's other hot statements (see the
// init at the end).

const queueCols = `name, max_delivery_count, poison_policy, dedupe_window_us, lock_duration_us, created_at, updated_at`

const sessionCols = `queue, session_id, next_seq, pending, ready_at, lock_holder, lock_token, locked_until, state,
 closed, blocked, created_at, updated_at`

const messageCols = `queue, session_id, seq, message_id, body, delivery_count, end_of_sequence, available_at,
 dead, dead_reason, dead_at, enqueued_at, trace_context`

// headSeq is the head of the session s: its message that is not dead with the
// smallest seq (NULL when none).
const headSeq = `(SELECT m.seq FROM queue_messages m WHERE m.queue = s.queue AND m.session_id = s.session_id
   AND m.dead = 0 ORDER BY m.seq LIMIT 1)`

// headAvailable is the available time of the head of the session row being
// updated (NULL when none): the session's ready_at.
const headAvailable = `(SELECT m.available_at FROM queue_messages m
   WHERE m.queue = queue_sessions.queue AND m.session_id = queue_sessions.session_id AND m.dead = 0
   ORDER BY m.seq LIMIT 1)`

// Statements that may update several rows say UPDATE OR FAIL: with the
// default (ABORT), SQLite keeps a statement journal, a copy of every page the
// statement changes, to undo just that statement if a later row violates a
// constraint, which made such an update cost several times what its rows
// do. None of these can violate one, and after any error the transaction is
// rolled back as a whole anyway (InTx does; a caller of InExternalTx must,
// as after any failed store call).

// lockHeld is the condition for a call under a lock: the ref's token is
// current and the lock unexpired. u is the VALUES list: column3 the token,
// column4 now.
const lockHeld = `s.lock_token = u.column3 AND s.lock_holder IS NOT NULL AND s.locked_until > u.column4`

const (
	qQueuePut = `INSERT INTO queues (` + queueCols + `) VALUES (?,?,?,?,?,?,?)
 ON CONFLICT (name) DO UPDATE SET max_delivery_count = excluded.max_delivery_count,
   poison_policy = excluded.poison_policy, dedupe_window_us = excluded.dedupe_window_us,
   lock_duration_us = excluded.lock_duration_us, updated_at = excluded.updated_at`
	qQueueGet = `SELECT ` + queueCols + ` FROM queues WHERE name = ?`
	// qQueueDepth reads at most ?2 sessions through queue_sessions_ready
	// and sums the pending messages of the first ?3.
	// The earliest ready_at (?4: now) of the first ?3 not held is the
	// oldest wait for a consumer.
	qQueueDepth = `SELECT count(*), coalesce(sum(CASE WHEN n <= ?3 THEN pending ELSE 0 END), 0),
   min(CASE WHEN n <= ?3 AND ready_at <= ?4 AND (lock_holder IS NULL OR locked_until <= ?4) THEN ready_at END)
 FROM (SELECT pending, ready_at, lock_holder, locked_until, row_number() OVER (ORDER BY ready_at) AS n
   FROM queue_sessions INDEXED BY queue_sessions_ready
   WHERE queue = ?1 AND ready_at IS NOT NULL AND blocked = 0 ORDER BY ready_at LIMIT ?2)`
	qQueueList   = `SELECT ` + queueCols + ` FROM queues WHERE name > ?`
	qQueueCreate = `INSERT INTO queues (name, created_at, updated_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`
	// qQueueWindows reads the dedupe windows of the queues in a JSON list.
	qQueueWindows = `SELECT name, dedupe_window_us FROM queues WHERE name IN (SELECT value FROM json_each(?))`

	// The lock duration: the caller's (?3, NULL when not given), else the
	// queue's, else the default.
	lockUntil = `?2 + coalesce(?3, (SELECT lock_duration_us FROM queues WHERE name = ?4), 30000000)`

	qSessionAcceptNamed = `UPDATE queue_sessions SET lock_holder = ?1, lock_token = lock_token + 1,
   locked_until = ` + lockUntil + `, updated_at = ?2
 WHERE queue = ?4 AND session_id = ?5 AND (lock_holder IS NULL OR locked_until <= ?2)
 RETURNING ` + sessionCols
	// sessionReady: the session's head is available at ?2, it is not
	// blocked, and nobody holds it.
	sessionReady = `ready_at IS NOT NULL AND blocked = 0 AND ready_at <= ?2
     AND (lock_holder IS NULL OR locked_until <= ?2)`
	qSessionAcceptNext = `UPDATE OR FAIL queue_sessions SET lock_holder = ?1, lock_token = lock_token + 1,
   locked_until = ` + lockUntil + `, updated_at = ?2
 WHERE queue = ?4 AND session_id IN (
   SELECT session_id FROM queue_sessions INDEXED BY queue_sessions_ready
   WHERE queue = ?4 AND ` + sessionReady + `
   ORDER BY ready_at, session_id LIMIT ?5)
 RETURNING ` + sessionCols
	qSessionAvailable = `SELECT EXISTS (SELECT 1 FROM queue_sessions INDEXED BY queue_sessions_ready
   WHERE queue = ?1 AND ` + sessionReady + `)`
	// qSessionNextReady: the first pending session whose head no lock holds
	// back (u), and the earliest lock end among the held sessions before
	// it (see the PostgreSQL driver's tSessionNextReady). SQLite's min of
	// several values is NULL if one is, hence the coalesces.
	qSessionNextReady = `WITH u AS (
   SELECT ready_at FROM queue_sessions INDEXED BY queue_sessions_ready
   WHERE queue = ?1 AND ready_at IS NOT NULL AND blocked = 0 AND (lock_holder IS NULL OR locked_until <= ready_at)
   ORDER BY ready_at LIMIT 1),
 h AS (
   SELECT min(locked_until) AS t FROM queue_sessions INDEXED BY queue_sessions_ready
   WHERE queue = ?1 AND ready_at IS NOT NULL AND blocked = 0 AND lock_holder IS NOT NULL AND locked_until > ready_at
     AND ready_at < coalesce((SELECT ready_at FROM u), 9223372036854775807))
 SELECT min(coalesce((SELECT ready_at FROM u), (SELECT t FROM h)), coalesce((SELECT t FROM h), (SELECT ready_at FROM u)))`
	qSessionExists = `SELECT count(*) FROM queue_sessions WHERE queue = ? AND session_id = ?`

	qSessionGet      = `SELECT ` + sessionCols + ` FROM queue_sessions WHERE queue = ? AND session_id = ?`
	qSessionStateSet = `UPDATE queue_sessions SET state = ?, updated_at = ?
 WHERE queue = ? AND session_id = ? AND lock_token = ? AND lock_holder IS NOT NULL AND locked_until > ?`
	qMessageResubmit = `UPDATE queue_messages SET dead = 0, dead_reason = NULL, dead_at = NULL, delivery_count = 0,
   available_at = ? WHERE queue = ? AND session_id = ? AND seq = ? AND dead = 1`
	qSessionResubmitted = `UPDATE queue_sessions SET pending = pending + 1, blocked = 0, ready_at = ` + headAvailable + `,
   updated_at = ? WHERE queue = ? AND session_id = ?`
	qMessageDiscard      = `DELETE FROM queue_messages WHERE queue = ? AND session_id = ? AND seq = ? AND dead = 1`
	qSessionUnblock      = `UPDATE queue_sessions SET blocked = 0, updated_at = ? WHERE queue = ? AND session_id = ?`
	qDedupeDeleteExpired = `DELETE FROM queue_dedupe WHERE (queue, message_id) IN (
   SELECT queue, message_id FROM queue_dedupe WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`
)

// Multi-row statements of the session queues (see multiRow).
var (
	// Publish: the state of the sessions published to, and the message IDs
	// already seen.
	mSessionPublishRead = newMultiRow(`SELECT queue, session_id, next_seq, closed FROM queue_sessions
 WHERE (queue, session_id) IN (VALUES `, `(?,?)`, `)`)
	mDedupeRead = newMultiRow(`SELECT queue, message_id, seq, expires_at FROM queue_dedupe
 WHERE (queue, message_id) IN (VALUES `, `(?,?)`, `)`)
	// mSessionPublish creates or advances the sessions: column3 is how many
	// messages the call adds, column5 the available time of its first one
	// (the head if the session had none pending), column6 end of sequence.
	mSessionPublish = newMultiRow(`INSERT INTO queue_sessions (queue, session_id, next_seq, pending, ready_at, closed,
 created_at, updated_at) VALUES `, `(?,?,?,?,?,?,?,?)`, ` ON CONFLICT (queue, session_id) DO UPDATE SET
   next_seq = next_seq + excluded.next_seq, pending = pending + excluded.pending,
   ready_at = coalesce(ready_at, excluded.ready_at), closed = max(closed, excluded.closed),
   updated_at = excluded.updated_at`)
	mMessageInsert = newMultiRow(`INSERT INTO queue_messages (`+messageCols+`) VALUES `,
		`(?,?,?,?,?,?,?,?,?,?,?,?,?)`, "")
	mDedupeUpsert = newMultiRow(`INSERT INTO queue_dedupe (queue, message_id, session_id, seq, expires_at) VALUES `,
		`(?,?,?,?,?)`, ` ON CONFLICT (queue, message_id) DO UPDATE SET session_id = excluded.session_id,
   seq = excluded.seq, expires_at = excluded.expires_at`)

	// Rows (queue, session_id, token, now, until).
	mSessionRenew = newMultiRow(`UPDATE OR FAIL queue_sessions AS s SET locked_until = u.column5, updated_at = u.column4
 FROM (VALUES `, `(?,?,?,?,?)`, `) AS u WHERE s.queue = u.column1 AND s.session_id = u.column2 AND `+lockHeld+`
 RETURNING queue, session_id`)
	// Rows (queue, session_id, token, now).
	mSessionRelease = newMultiRow(`UPDATE OR FAIL queue_sessions AS s SET lock_holder = NULL, locked_until = NULL,
   updated_at = u.column4 FROM (VALUES `, `(?,?,?,?)`, `) AS u
 WHERE s.queue = u.column1 AND s.session_id = u.column2 AND `+lockHeld+`
 RETURNING queue, session_id`)

	// mSessionHeads returns, of the sessions whose lock is held (rows:
	// queue, session_id, token, now), whether they are blocked and their
	// head's seq.
	mSessionHeads = newMultiRow(`SELECT s.queue, s.session_id, s.blocked, `+headSeq+`
 FROM (VALUES `, `(?,?,?,?)`, `) AS u
 JOIN queue_sessions s ON s.queue = u.column1 AND s.session_id = u.column2
 WHERE `+lockHeld)
	// Settle, rows (queue, session_id, seq[, …]).
	mMessageComplete = newMultiRow(`DELETE FROM queue_messages WHERE (queue, session_id, seq) IN (VALUES `,
		`(?,?,?)`, `)`)
	mMessageAbandon = newMultiRow(`UPDATE OR FAIL queue_messages SET available_at = u.column4 FROM (VALUES `,
		`(?,?,?,?)`, `) AS u WHERE queue_messages.queue = u.column1 AND queue_messages.session_id = u.column2
   AND queue_messages.seq = u.column3`)
	mMessageDeadLetter = newMultiRow(`UPDATE OR FAIL queue_messages SET dead = 1, dead_reason = u.column4, dead_at = u.column5
 FROM (VALUES `, `(?,?,?,?,?)`, `) AS u WHERE queue_messages.queue = u.column1
   AND queue_messages.session_id = u.column2 AND queue_messages.seq = u.column3`)
	// mSessionSettle settles the heads of held sessions, session side
	// (rows: queue, session_id, token, seq, now, pending decrement, block,
	// set state, state, abandon, the abandoned message's new available
	// time): only where the lock is held and seq is the head. ready_at
	// follows the head the settle leaves: the abandoned message at its new
	// time, or the next message after seq. The caller then settles the
	// messages of the sessions it updated.
	mSessionSettle = newMultiRow(`UPDATE OR FAIL queue_sessions AS s SET pending = s.pending - u.column6,
   blocked = max(s.blocked, u.column7), state = CASE WHEN u.column8 THEN u.column9 ELSE s.state END,
   ready_at = CASE WHEN u.column10 THEN u.column11 ELSE (SELECT m.available_at FROM queue_messages m
     WHERE m.queue = s.queue AND m.session_id = s.session_id AND m.dead = 0 AND m.seq > u.column4
     ORDER BY m.seq LIMIT 1) END,
   updated_at = u.column5
 FROM (VALUES `, `(?,?,?,?,?,?,?,?,?,?,?)`, `) AS u WHERE s.queue = u.column1 AND s.session_id = u.column2
   AND s.lock_token = u.column3 AND s.lock_holder IS NOT NULL AND s.locked_until > u.column5
   AND u.column4 = `+headSeq)
	// mSessionHeadsReady reads, of the sessions whose lock is held (rows:
	// queue, session_id, token, now), the head message if the session is
	// not blocked and the head is available at now (NULL message columns
	// otherwise); mMessageDelivered then counts those deliveries (rows:
	// queue, session_id, seq). A read and a keyed update cost less than one
	// UPDATE … RETURNING.
	mSessionHeadsReady = newMultiRow(`SELECT s.queue, s.session_id, hm.seq, hm.message_id, hm.body, hm.delivery_count,
   hm.end_of_sequence, hm.available_at, hm.enqueued_at, hm.trace_context
 FROM (VALUES `, `(?,?,?,?)`, `) AS u
 JOIN queue_sessions s ON s.queue = u.column1 AND s.session_id = u.column2
 LEFT JOIN queue_messages hm ON s.blocked = 0 AND hm.queue = s.queue AND hm.session_id = s.session_id
   AND hm.seq = `+headSeq+` AND hm.available_at <= u.column4
 WHERE `+lockHeld)
	mMessageDelivered = newMultiRow(`UPDATE OR FAIL queue_messages SET delivery_count = delivery_count + 1
 WHERE (queue, session_id, seq) IN (VALUES `, `(?,?,?)`, `)`)

	queueMultiRows = []multiRow{mSessionPublishRead, mDedupeRead, mSessionPublish, mMessageInsert, mDedupeUpsert,
		mSessionRenew, mSessionRelease, mSessionHeads, mMessageComplete, mMessageAbandon,
		mMessageDeadLetter, mSessionSettle, mSessionHeadsReady, mMessageDelivered}
)

// The queue statements join the driver's hot statements, prepared once per
// driver (Driver.prepare), so a processor round does not re-parse them.
func init() {
	hotQueries = append(hotQueries, qQueueGet, qQueueWindows, qSessionAcceptNamed, qSessionAcceptNext, qSessionAvailable,
		qSessionExists, qSessionGet, qSessionStateSet, qDedupeDeleteExpired)
	for _, m := range queueMultiRows {
		hotQueries = append(hotQueries, m.allSizes()...)
	}
}
