package postgres

import "strings"

// The SQL of the PostgreSQL driver. Every statement names its tables with the
// placeholder {s}, replaced once at Open by the quoted schema, so the same text
// runs on the driver's pool and on a caller's transaction whatever that
// connection's search_path. The texts are fixed (batches travel as array
// parameters), so pgx prepares each one once per connection and reuses it.

// Column lists shared by the task and step queries.
const taskCols = `id, workflow, input, input_hash, process_state, locked_by, complete_by, failure_count,
 current_step, step_count, ordering_key, output, last_error, failure_threshold, on_failure,
 retry_delay_us, available_at, created_at, updated_at, ordering_seq, workflow_version, callback_url,
 wait_max, wait_delay_us, wait_multiplier, wait_max_delay_us, callback_events, submitter, trace_context, priority`

const stepCols = `task_id, step_index, name, agent, timeout_us, compensation, process_state, compensation_state,
 locked_by, complete_by, failure_count, attempt, idempotency_key, output, last_error, started_at, finished_at, updated_at,
 on_failure, wait_max, wait_delay_us, wait_multiplier, wait_max_delay_us, signal_name, signal_default, step_group, finish_seq`

const eventCols = `id, task_id, step_index, event_type, state, alert, actor, term, attempt, message, created_at, more`

// prefixed returns a column list with every column qualified by alias.
func prefixed(alias, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = alias + "." + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}

const (
	tTaskGet     = `SELECT ` + taskCols + ` FROM {s}.tasks WHERE id = $1`
	tTaskGetLock = tTaskGet + ` FOR UPDATE`

	// Locking reads take their rows in ID order, the same order every
	// locking read uses, so two transactions never wait on each other in a
	// cycle over tasks.
	tTaskGetMany     = `SELECT ` + taskCols + ` FROM {s}.tasks WHERE id = ANY($1::text[]) ORDER BY id`
	tTaskGetManyLock = tTaskGetMany + ` FOR UPDATE`

	tTaskCountByState = `SELECT process_state, count(*) FROM {s}.tasks GROUP BY process_state`

	tTaskCountLockedBy = `SELECT count(*) FROM {s}.tasks WHERE locked_by = $1 AND complete_by IS NOT NULL`

	// tTaskCountActive counts through the two partial indexes, so its cost
	// follows the active tasks, not the table.
	tTaskCountActive = `SELECT (SELECT count(*) FROM {s}.tasks
   WHERE locked_by IS NULL AND process_state IN ('Pending','Compensating'))
 + (SELECT count(*) FROM {s}.tasks WHERE locked_by IS NOT NULL)`

	// tTaskCountActiveIn counts a namespace's tasks ($1, $2: its
	// store.NamespaceRange) through tasks_namespace_active, whose
	// condition it repeats so that the planner may use it.
	tTaskCountActiveIn = `SELECT count(*) FROM {s}.tasks
 WHERE id >= $1 AND id < $2 AND strpos(id, '/') > 0 AND process_state IN ('Pending','Processing','Compensating')`

	// tTaskCountActiveBySubmitter counts through tasks_submitter_active.
	tTaskCountActiveBySubmitter = `SELECT count(*) FROM {s}.tasks
 WHERE submitter = $1 AND submitter <> '' AND process_state IN ('Pending','Processing','Compensating')`

	// tTaskDeleteFinished deletes a batch of old final tasks and everything
	// that hangs off them, in one statement.
	// Retention: tTaskPickFinished takes the oldest final tasks (without
	// those of the keys in $3, found busy by an earlier pass), at most $2,
	// in a MATERIALIZED CTE, so that however it is planned it locks at
	// most $2 keys: then each one's ordering key, with SKIP LOCKED. It
	// never waits for a submit, which holds its keys until it commits and
	// may itself wait for a task being deleted (an ID it submits again).
	// Per task: whether it locked the key, and whether the key is busy
	// (another transaction holds it): TaskDeleteFinished passes over busy
	// keys' tasks and picks again without them, so a busy key does not
	// stall retention. A key with no row locks nothing; its task is
	// deleted and the key not pruned. tTaskDeleteFinished then locks and
	// deletes the picked tasks still final and old enough. Deleting a
	// keyed task updates its key's row (a trigger counts the key's tasks),
	// which retention holds by then.
	tTaskPickFinished = `WITH c AS MATERIALIZED (
   SELECT id, ordering_key, updated_at FROM {s}.tasks
   WHERE process_state IN ('Processed','Error','Compensated','Cancelled') AND updated_at < $1
     AND (ordering_key IS NULL OR ordering_key <> ALL($3::text[]))
   ORDER BY updated_at LIMIT $2)
 SELECT c.id, c.ordering_key, k.key IS NOT NULL,
   c.ordering_key IS NOT NULL AND k.key IS NULL
     AND EXISTS (SELECT 1 FROM {s}.ordering_keys AS x WHERE x.key = c.ordering_key)
 FROM c LEFT JOIN LATERAL (SELECT k.key FROM {s}.ordering_keys AS k WHERE k.key = c.ordering_key FOR UPDATE SKIP LOCKED) AS k ON true
 ORDER BY c.updated_at`
	// tTaskFinishedSince feeds the console's charts: the newest final
	// tasks, backwards through tasks_finished.
	tTaskFinishedSince = `SELECT process_state, created_at, updated_at FROM {s}.tasks
   WHERE process_state IN ('Processed','Error','Compensated','Cancelled') AND updated_at >= $1
   ORDER BY updated_at DESC LIMIT $2`
	tTaskDeleteFinished = `WITH pick AS MATERIALIZED (
   SELECT id FROM {s}.tasks
   WHERE id = ANY($2::text[]) AND process_state IN ('Processed','Error','Compensated','Cancelled') AND updated_at < $1
   FOR UPDATE SKIP LOCKED),
 ev AS (DELETE FROM {s}.events WHERE task_id IN (SELECT id FROM pick)),
 rq AS (DELETE FROM {s}.agent_requests WHERE task_id IN (SELECT id FROM pick)),
 rp AS (DELETE FROM {s}.agent_replies WHERE task_id IN (SELECT id FROM pick)),
 sg AS (DELETE FROM {s}.signals WHERE task_id IN (SELECT id FROM pick)),
 st AS (DELETE FROM {s}.steps WHERE task_id IN (SELECT id FROM pick))
 DELETE FROM {s}.tasks WHERE id IN (SELECT id FROM pick) RETURNING ordering_key`

	tTaskListLockedBy = `SELECT ` + taskCols + ` FROM {s}.tasks
 WHERE locked_by = $1 AND complete_by IS NOT NULL ORDER BY id LIMIT $2`

	tTaskListExpired = `SELECT ` + taskCols + ` FROM {s}.tasks
 WHERE locked_by IS NOT NULL AND complete_by < $1 ORDER BY complete_by, id LIMIT $2`

	// tTaskListExpiredLock picks the oldest deadlines, then locks them in ID
	// order. The outer WHERE repeats the condition so a task another
	// transaction released or renewed while we waited for its lock is
	// re-checked and left out.
	tTaskListExpiredLock = `SELECT ` + taskCols + ` FROM {s}.tasks
 WHERE id IN (SELECT id FROM {s}.tasks WHERE locked_by IS NOT NULL AND complete_by < $1 ORDER BY complete_by, id LIMIT $2)
   AND locked_by IS NOT NULL AND complete_by < $1
 ORDER BY id FOR UPDATE`

	// tTaskNextAvailable finds the first claimable task not yet available in
	// claim order ($2 is Now less the longest lead a priority gives), then
	// the earliest AvailableAt among the tasks up to that lead after it
	// (at most $4, $3 the lead in microseconds): a higher priority's task
	// comes earlier in claim order than in time; and, with $5
	// (TaskNextAvailableParams.Due), whether a task is claimable now (d).
	// All three walk tasks_claimable.
	tTaskNextAvailable = `WITH f AS (
   SELECT c.claim_at FROM {s}.tasks AS c
   WHERE c.locked_by IS NULL AND c.process_state IN ('Pending','Compensating') AND c.claim_at > $2 AND c.available_at > $1
   ORDER BY c.claim_at, c.id LIMIT 1),
 w AS (
   SELECT c.available_at FROM {s}.tasks AS c, f
   WHERE c.locked_by IS NULL AND c.process_state IN ('Pending','Compensating')
     AND c.claim_at >= f.claim_at AND c.claim_at <= f.claim_at + $3 * interval '1 microsecond' AND c.available_at > $1
   ORDER BY c.claim_at, c.id LIMIT $4)
,
 d AS (
   SELECT 1 FROM {s}.tasks AS c
   WHERE $5 AND c.locked_by IS NULL AND c.process_state IN ('Pending','Compensating') AND c.claim_at <= $1 AND c.available_at <= $1
     AND ` + orderingFree + `
   ORDER BY c.claim_at, c.id LIMIT 1)
 SELECT (SELECT claim_at FROM f), (SELECT min(available_at) FROM w), (SELECT count(*) FROM w), EXISTS (SELECT 1 FROM d)`

	tTaskInsert = `INSERT INTO {s}.tasks (` + taskCols + `, claim_at)
 SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
   $8::int[], $9::int[], $10::int[], $11::text[], $12::bytea[], $13::text[], $14::int[], $15::text[], $16::bigint[],
   $17::timestamptz[], $18::timestamptz[], $19::timestamptz[], $20::bigint[], $21::int[], $22::text[],
   $23::int[], $24::bigint[], $25::float8[], $26::bigint[], $27::text[], $28::text[], $29::text[], $30::smallint[],
   $31::timestamptz[])
   AS u(` + taskCols + `, claim_at)
 ORDER BY id
 ON CONFLICT (id) DO NOTHING
 RETURNING id`

	// tOrderingReserve moves each key's last position on by the number of
	// positions wanted and returns the new last position (a new key starts
	// at 0). The upsert locks each key's row until the transaction ends, so
	// a second transaction reserving the same key waits for this one to
	// commit: positions follow commit order. Keys are distinct and arrive
	// sorted (ORDER BY ord keeps that order), so two transactions lock
	// their common keys in the same order and never deadlock on them.
	tOrderingReserve = `INSERT INTO {s}.ordering_keys AS k (key, last_seq)
 SELECT key, n FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(key, n, ord)
 ORDER BY ord
 ON CONFLICT (key) DO UPDATE SET last_seq = k.last_seq + excluded.last_seq
 RETURNING key, last_seq`

	// tOrderingPrune deletes the keys left without tasks.
	tOrderingPrune = `DELETE FROM {s}.ordering_keys WHERE key = ANY($1::text[]) AND task_count <= 0`

	tTaskUpdate = `UPDATE {s}.tasks AS t SET process_state = u.process_state, locked_by = u.locked_by,
   complete_by = u.complete_by, failure_count = u.failure_count, current_step = u.current_step,
   output = u.output, last_error = u.last_error, available_at = u.available_at, updated_at = u.updated_at,
   claim_at = u.claim_at
 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::int[], $6::int[], $7::bytea[], $8::text[],
   $9::timestamptz[], $10::timestamptz[], $11::timestamptz[])
   AS u(id, process_state, locked_by, complete_by, failure_count, current_step, output, last_error, available_at, updated_at,
     claim_at)
 WHERE t.id = u.id`

	tStepList     = `SELECT ` + stepCols + ` FROM {s}.steps WHERE task_id = ANY($1::text[]) ORDER BY task_id, step_index`
	tStepListLock = tStepList + ` FOR UPDATE`

	tStepInsert = `INSERT INTO {s}.steps (` + stepCols + `)
 SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[],
   $9::text[], $10::timestamptz[], $11::int[], $12::int[], $13::text[], $14::bytea[], $15::text[], $16::timestamptz[],
   $17::timestamptz[], $18::timestamptz[], $19::text[], $20::int[], $21::bigint[], $22::float8[], $23::bigint[],
   $24::text[], $25::bytea[], $26::text[], $27::int[])
   AS u(` + stepCols + `)
 ORDER BY task_id, step_index`

	tStepUpdate = `UPDATE {s}.steps AS s SET process_state = u.process_state, compensation_state = u.compensation_state,
   locked_by = u.locked_by, complete_by = u.complete_by, failure_count = u.failure_count, attempt = u.attempt,
   output = u.output, last_error = u.last_error, started_at = u.started_at, finished_at = u.finished_at,
   updated_at = u.updated_at, idempotency_key = u.idempotency_key, finish_seq = u.finish_seq
 FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::int[], $8::int[],
   $9::bytea[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[], $14::text[], $15::int[])
   AS u(task_id, step_index, process_state, compensation_state, locked_by, complete_by, failure_count, attempt,
        output, last_error, started_at, finished_at, updated_at, idempotency_key, finish_seq)
 WHERE s.task_id = u.task_id AND s.step_index = u.step_index`

	// Inserts that hand IDs back: rows are fed in input order (ORDER BY
	// ord), so the sequence numbers them in that order; the caller sorts the
	// returned IDs and assigns them back by position.
	requestInsCols = `agent, task_id, step_index, attempt, kind, idempotency_key, complete_by, scheduler, claimed_by, created_at,
 previous_own, previous_output`
	tRequestInsert = `INSERT INTO {s}.agent_requests (` + requestInsCols + `)
 SELECT ` + requestInsCols + ` FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::text[], $6::text[],
   $7::timestamptz[], $8::text[], $9::text[], $10::timestamptz[], $11::boolean[], $12::bytea[])
   WITH ORDINALITY AS u(` + requestInsCols + `, ord)
 ORDER BY ord
 RETURNING id`

	// tRequestClaim claims and joins the payload in one round trip: the
	// task's input, the step's own output (for compensation) and the output
	// of the step before.
	tRequestClaim = `WITH c AS MATERIALIZED (
   SELECT id FROM {s}.agent_requests
   WHERE agent = $2 AND claimed_by IS NULL AND complete_by > $3 AND (available_at IS NULL OR available_at <= $3)
   ORDER BY id LIMIT $4
   FOR UPDATE SKIP LOCKED),
 u AS (
   UPDATE {s}.agent_requests AS r SET claimed_by = $1 FROM c WHERE r.id = c.id
   RETURNING r.id, r.agent, r.task_id, r.step_index, r.attempt, r.kind, r.idempotency_key, r.complete_by,
     r.scheduler, r.created_at, r.previous_own, r.previous_output)
 SELECT u.id, u.agent, u.task_id, u.step_index, u.attempt, u.kind, u.idempotency_key, u.complete_by, u.scheduler,
   u.created_at, t.workflow, t.input, s.name, s.output,
   CASE WHEN u.previous_own THEN u.previous_output ELSE p.output END, coalesce(t.trace_context, '')
 FROM u
 LEFT JOIN {s}.tasks t ON t.id = u.task_id
 LEFT JOIN {s}.steps s ON s.task_id = u.task_id AND s.step_index = u.step_index
 LEFT JOIN {s}.steps p ON p.task_id = u.task_id AND p.step_index = u.step_index - 1
 ORDER BY u.id`

	tRequestDeleteByStep = `DELETE FROM {s}.agent_requests AS r
 USING unnest($1::text[], $2::int[]) AS u(task_id, step_index)
 WHERE r.task_id = u.task_id AND r.step_index = u.step_index`

	tStepMessagesExist = `SELECT u.i - 1 FROM unnest($1::text[], $2::int[], $3::int[], $4::text[])
   WITH ORDINALITY AS u(task_id, step_index, attempt, kind, i)
 WHERE EXISTS (SELECT 1 FROM {s}.agent_requests AS r WHERE r.task_id = u.task_id AND r.step_index = u.step_index
     AND r.attempt = u.attempt AND r.kind = u.kind)
    OR EXISTS (SELECT 1 FROM {s}.agent_replies AS r WHERE r.task_id = u.task_id AND r.step_index = u.step_index
     AND r.attempt = u.attempt AND r.kind = u.kind)`

	tRequestRelease = `UPDATE {s}.agent_requests SET claimed_by = NULL WHERE claimed_by = $1`

	tRequestDeleteExpired = `WITH c AS MATERIALIZED (
   SELECT id FROM {s}.agent_requests WHERE complete_by < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
 DELETE FROM {s}.agent_requests AS r USING c WHERE r.id = c.id`

	replyInsCols = `task_id, step_index, attempt, kind, output, failed, error, created_at`
	tReplyInsert = `INSERT INTO {s}.agent_replies (` + replyInsCols + `)
 SELECT ` + replyInsCols + ` FROM unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::bytea[], $6::bool[],
   $7::text[], $8::timestamptz[])
   WITH ORDINALITY AS u(` + replyInsCols + `, ord)
 ORDER BY ord
 RETURNING id`

	// tReplyTake: replies for tasks the scheduler holds, or for tasks nobody
	// holds (stale, to discard). SKIP LOCKED: two takers never wait on or
	// share a reply.
	tReplyTake = `WITH c AS MATERIALIZED (
   SELECT r.id FROM {s}.agent_replies r LEFT JOIN {s}.tasks t ON t.id = r.task_id
   WHERE t.locked_by = $1 OR t.locked_by IS NULL
   ORDER BY r.id LIMIT $2
   FOR UPDATE OF r SKIP LOCKED),
 d AS (
   DELETE FROM {s}.agent_replies AS r USING c WHERE r.id = c.id
   RETURNING r.id, r.task_id, r.step_index, r.attempt, r.kind, r.output, r.failed, r.error, r.created_at)
 SELECT * FROM d ORDER BY id`

	// tEventLock marks a transaction as an event writer from before its
	// first event ID until it ends. Shared: writers never wait for each
	// other; a tailing reader waits for the writers it saw (see doc.go).
	tEventLock = `SELECT pg_advisory_xact_lock_shared($1)`

	// tEventSeq reads the last event ID handed out. A sequence is not
	// transactional: this is the latest value, committed or not.
	tEventSeq = `SELECT tableoid::oid, last_value, is_called FROM {s}.events_id_seq`

	// tEventWriters lists the transactions that hold the event-writer lock
	// (key split as PostgreSQL shows advisory keys in pg_locks), and whether
	// each is this session's (a prepared transaction has no pid). With $3
	// set, only those of that list still holding it.
	tEventWriters = `SELECT virtualtransaction, pid IS NOT DISTINCT FROM pg_backend_pid() FROM pg_catalog.pg_locks
 WHERE locktype = 'advisory' AND granted AND objsubid = 1
   AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
   AND classid = $1::bigint::oid AND objid = $2::bigint::oid
   AND ($3::text[] IS NULL OR virtualtransaction = ANY($3::text[]))`

	eventInsCols = `task_id, step_index, event_type, state, alert, actor, term, attempt, message, created_at, namespace, more`
	tEventInsert = `INSERT INTO {s}.events (` + eventInsCols + `)
 SELECT ` + eventInsCols + ` FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::bool[], $6::text[],
   $7::bigint[], $8::int[], $9::text[], $10::timestamptz[], $11::text[], $12::text[])
   WITH ORDINALITY AS u(` + eventInsCols + `, ord)
 ORDER BY ord
 RETURNING id`

	// tEventList reads the event rows that may hold an event after $2:
	// those from store.EventRowsFloor($2) ($1) on that either start after
	// it or hold more than one event; $3 bounds them (eventsFinal).
	tEventList = `SELECT ` + eventCols + ` FROM {s}.events WHERE id > $1 AND (id > $2 OR more IS NOT NULL) AND id <= $3`

	// tLeaseAcquire: one statement inserts a fresh lease, renews our own or
	// takes an expired one; the term moves on whenever the holder changes.
	tLeaseAcquire = `INSERT INTO {s}.leases AS l (name, holder, term, expires_at) VALUES ($1, $2, 1, $4)
 ON CONFLICT (name) DO UPDATE SET
   term = CASE WHEN l.holder = EXCLUDED.holder THEN l.term ELSE l.term + 1 END,
   holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
 WHERE l.holder = EXCLUDED.holder OR l.expires_at <= $3
 RETURNING name, holder, term, expires_at`

	// tLeaseList: the leases table holds a row per lease name ever taken
	// (a few per process), so a scan is fine.
	tLeaseList = `SELECT name, holder, term, expires_at FROM {s}.leases
 WHERE starts_with(name, $1) AND expires_at > $2 ORDER BY name LIMIT $3`
	tLeaseGet     = `SELECT name, holder, term, expires_at FROM {s}.leases WHERE name = $1`
	tLeaseGetLock = tLeaseGet + ` FOR UPDATE`

	// A lease's advisory lock (key from its name and the schema): writers
	// of the lease take it exclusive, LeaseCheck shared, so checks never
	// wait for each other and a takeover waits for every checking
	// transaction. A row lock could not do this: FOR SHARE lockers jump
	// ahead of a waiting UPDATE, which could then wait forever.
	tLeaseLock       = `SELECT pg_advisory_xact_lock($1)`
	tLeaseLockShared = `SELECT pg_advisory_xact_lock_shared($1)`

	// A released lease expires at the epoch: free at once for anyone.
	tLeaseRelease = `UPDATE {s}.leases SET expires_at = 'epoch' WHERE name = $1 AND holder = $2 AND term = $3`

	tMigrationsTable = `CREATE TABLE IF NOT EXISTS {s}.drover_migrations (
    version    integer     NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	tMigrationApplied = `SELECT EXISTS (SELECT 1 FROM {s}.drover_migrations WHERE version = $1)`
	tMigrationRecord  = `INSERT INTO {s}.drover_migrations (version, name) VALUES ($1, $2)`
	tMigrationMax     = `SELECT coalesce(max(version), 0) FROM {s}.drover_migrations`
	tSearchPath       = `SET LOCAL search_path TO {s}`
	tCreateSchema     = `CREATE SCHEMA {s}`
	// The schema name is a plain identifier (Open checks it), so it needs
	// no escaping inside the literal.
	tMigrationsExist = `SELECT to_regclass('{s}.drover_migrations') IS NOT NULL`
)

// taskColsT is taskCols qualified by the alias t, for RETURNING after a join.
var taskColsT = prefixed("t", taskCols)

var (
	// tTaskClaim: the candidates are locked with SKIP LOCKED, so competing
	// schedulers each take different tasks without waiting for each other.
	// The CTE is MATERIALIZED so the locking subquery runs exactly once (an
	// IN (subquery) may be rescanned and lock more than LIMIT rows).
	//
	// A Pending task with an ordering key is skipped while an earlier task
	// of its key is not final: a correlated probe of the tasks_ordering
	// partial index per such candidate (under the OR it stays a per-row
	// subplan, never a scan of the whole index).
	tTaskClaim = `WITH c AS MATERIALIZED (
   SELECT c.id FROM {s}.tasks AS c ` + claimable("$2", "$3", "$4", "$5") + `)
 UPDATE {s}.tasks AS t SET locked_by = $1,
   process_state = CASE t.process_state WHEN 'Pending' THEN 'Processing' ELSE t.process_state END,
   updated_at = $2
 FROM c WHERE t.id = c.id
 RETURNING ` + taskColsT
)

// orderingFree holds for a task c of tasks that its ordering key does not
// hold back: a Pending task with a key waits while an earlier task of its
// key is not final.
const orderingFree = `(c.ordering_key IS NULL OR c.process_state = 'Compensating' OR NOT EXISTS (
     SELECT 1 FROM {s}.tasks AS p
     WHERE p.ordering_key = c.ordering_key AND p.ordering_seq < c.ordering_seq
       AND p.process_state IN ('Pending','Processing','Compensating')))`

// claimable is the claim's WHERE, ORDER BY, LIMIT and row locks over
// tasks AS c, with now and limit the statement's parameters.
//
// afterAt and afterID are the claim's start (TaskClaimParams.After): the
// row comparison is an index condition of tasks_claimable, so the scan
// starts there. Without After the executor passes -infinity.
func claimable(now, limit, afterAt, afterID string) string {
	return `WHERE c.locked_by IS NULL AND c.process_state IN ('Pending','Compensating') AND c.claim_at <= ` + now + `
   AND c.available_at <= ` + now + `
   AND (c.claim_at, c.id) > (` + afterAt + `::timestamptz, ` + afterID + `::text)
   AND ` + orderingFree + `
   ORDER BY c.claim_at, c.id LIMIT ` + limit + `
   FOR UPDATE OF c SKIP LOCKED`
}

// tTaskClaimLock is the claim when the caller writes the tasks itself
// (TaskClaimParams.WriteLater): it only locks them, so each claimed row is
// written once per dispatch instead of twice. A competing claim skips the
// locked rows, and one that locks a row after this transaction committed
// re-checks the row's new version (locked_by is set by then) under READ
// COMMITTED.
var tTaskClaimLock = `SELECT ` + prefixed("c", taskCols) + ` FROM {s}.tasks AS c ` + claimable("$1", "$2", "$3", "$4")

// nTaskCols and nStepCols count the columns of taskCols and stepCols.
var nTaskCols, nStepCols = len(strings.Split(taskCols, ",")), len(strings.Split(stepCols, ","))

// tTaskClaimLockSteps is tTaskClaimLock that also returns the claimed
// tasks' steps, locked, in the same statement: the claim runs in a
// MATERIALIZED CTE, the steps of the tasks it locked are read in a second
// one, and the result is the task rows followed by the step rows, each
// padded with NULLs where the other kind's columns are (a step row's first
// column, the task ID, is NULL). The claim's order does not survive the
// UNION: TaskClaimWithSteps sorts the rows again. The steps are found with
// = ANY(ARRAY(…)), one index scan over all the IDs, rather than IN (…),
// which the planner runs as an index scan per task (about 25% slower for
// 256 tasks, EXPLAIN ANALYZE).
var tTaskClaimLockSteps = func() string {
	nulls := func(n int) string { return strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ") }
	return `WITH c AS MATERIALIZED (` + tTaskClaimLock + `),
 s AS MATERIALIZED (SELECT ` + stepCols + ` FROM {s}.steps WHERE task_id = ANY(ARRAY(SELECT id FROM c))
   ORDER BY task_id, step_index FOR UPDATE)
 SELECT ` + taskCols + `, ` + nulls(nStepCols) + ` FROM c
 UNION ALL
 SELECT ` + nulls(nTaskCols) + `, ` + stepCols + ` FROM s`
}()

// tTaskGetManySkip locks and returns the tasks of $1 that no other
// transaction holds locked, skipping the others; tTaskExisting then tells
// a skipped task (busy) from one that does not exist. A scheduler reads the
// tasks it holds this way so as not to wait for a claim elsewhere that
// locked one of them by chance: under READ COMMITTED, a claim that reaches
// a row whose newer version is no longer claimable skips it but keeps its
// lock until it commits.
var (
	tTaskGetManySkip = tTaskGetMany + ` FOR UPDATE SKIP LOCKED`
	tTaskExisting    = `SELECT id FROM {s}.tasks WHERE id = ANY($1::text[])`
)

// queries holds every statement with the schema filled in.
type queries struct {
	taskGet, taskGetLock, taskGetMany, taskGetManyLock, taskCountByState, taskCountLockedBy,
	taskCountActive, taskCountActiveIn, taskCountActiveBySubmitter, taskDeleteFinished, taskClaim, taskClaimLock, taskClaimLockSteps, taskGetManySkip, taskExisting, taskListLockedBy, taskListExpired, taskListExpiredLock, taskNextAvailable,
	taskInsert, taskUpdate, taskList, taskPickFinished, taskFinishedSince string
	orderingReserve, orderingPrune string

	stepList, stepListLock, stepInsert, stepUpdate string

	requestInsert, requestClaim, requestDeleteByStep, stepMessagesExist, requestRelease, requestDeleteExpired string

	replyInsert, replyTake string

	eventLock, eventInsert, eventList string
	eventSeq, eventWriters            string

	leaseAcquire, leaseGet, leaseGetLock, leaseRelease, leaseList string

	migrationsTable, migrationApplied, migrationRecord, migrationMax, searchPath, createSchema string
	migrationsExist                                                                            string

	remote      remoteQueries      // remote.go
	webhook     webhookQueries     // webhook.go
	workflowDef workflowDefQueries // workflowdef.go
	signal      signalQueries      // signal.go
	schedule    scheduleQueries    // schedule.go
	console     consoleQueries     // console.go

	// Session queues (queue_queries.go).
	queuePut, queueGet, queueList, queueDepth                   string
	publishPrepare, dedupeClaim, dedupeGet, publish             string
	sessionAcceptNamed, sessionAcceptNext, sessionExists        string
	sessionAvailable                                            string
	sessionNextReady                                            string
	sessionRenew, sessionRelease, receive, settleLock, settle   string
	sessionGet, sessionGetLock, sessionList, sessionStateSet    string
	messagePeek, deadLetterList, sessionLock, resubmit, discard string
	dedupeDeleteExpired                                         string
}

// newQueries fills the quoted schema name into every statement of the
// driver. It is the one place the schema is qualified: Open calls it once,
// and every statement, migrations' bookkeeping included, comes from it.
func newQueries(quotedSchema string) *queries {
	r := func(s string) string { return strings.ReplaceAll(s, "{s}", quotedSchema) }
	return &queries{
		taskGet:                    r(tTaskGet),
		taskGetLock:                r(tTaskGetLock),
		taskGetMany:                r(tTaskGetMany),
		taskGetManyLock:            r(tTaskGetManyLock),
		taskCountByState:           r(tTaskCountByState),
		taskCountLockedBy:          r(tTaskCountLockedBy),
		taskCountActive:            r(tTaskCountActive),
		taskCountActiveIn:          r(tTaskCountActiveIn),
		taskCountActiveBySubmitter: r(tTaskCountActiveBySubmitter),
		taskDeleteFinished:         r(tTaskDeleteFinished),
		taskPickFinished:           r(tTaskPickFinished),
		taskFinishedSince:          r(tTaskFinishedSince),
		taskClaim:                  r(tTaskClaim),
		taskClaimLock:              r(tTaskClaimLock),
		taskClaimLockSteps:         r(tTaskClaimLockSteps),
		taskGetManySkip:            r(tTaskGetManySkip),
		taskExisting:               r(tTaskExisting),
		taskListLockedBy:           r(tTaskListLockedBy),
		taskListExpired:            r(tTaskListExpired),
		taskListExpiredLock:        r(tTaskListExpiredLock),
		taskNextAvailable:          r(tTaskNextAvailable),
		taskInsert:                 r(tTaskInsert),
		taskUpdate:                 r(tTaskUpdate),
		taskList:                   r(`SELECT ` + taskCols + ` FROM {s}.tasks`),
		orderingReserve:            r(tOrderingReserve),
		orderingPrune:              r(tOrderingPrune),

		stepList:     r(tStepList),
		stepListLock: r(tStepListLock),
		stepInsert:   r(tStepInsert),
		stepUpdate:   r(tStepUpdate),

		requestInsert:        r(tRequestInsert),
		requestClaim:         r(tRequestClaim),
		requestDeleteByStep:  r(tRequestDeleteByStep),
		stepMessagesExist:    r(tStepMessagesExist),
		requestRelease:       r(tRequestRelease),
		requestDeleteExpired: r(tRequestDeleteExpired),

		replyInsert: r(tReplyInsert),
		replyTake:   r(tReplyTake),

		eventLock:    tEventLock,
		eventInsert:  r(tEventInsert),
		eventList:    r(tEventList),
		eventSeq:     r(tEventSeq),
		eventWriters: tEventWriters,

		leaseAcquire: r(tLeaseAcquire),
		leaseGet:     r(tLeaseGet),
		leaseList:    r(tLeaseList),
		leaseGetLock: r(tLeaseGetLock),
		leaseRelease: r(tLeaseRelease),

		migrationsTable:  r(tMigrationsTable),
		migrationApplied: r(tMigrationApplied),
		migrationRecord:  r(tMigrationRecord),
		migrationMax:     r(tMigrationMax),
		searchPath:       r(tSearchPath),
		createSchema:     r(tCreateSchema),
		migrationsExist:  r(tMigrationsExist),

		remote: remoteQueries{get: r(tRemoteGet), available: r(tRemoteAvailable), complete: r(tRemoteComplete),
			release: r(tRemoteRelease), exists: r(tRemoteExists)},
		webhook: webhookQueries{
			cursorLock: r(tWebhookCursorLock), cursorCreate: r(tWebhookCursorCreate), cursorSet: r(tWebhookCursorSet),
			insert: r(tWebhookInsert), claim: r(tWebhookClaim), finish: r(tWebhookFinish), release: r(tWebhookRelease),
			list: r(tWebhookList), deleteFinished: r(tWebhookDeleteFinished),
		},
		signal: signalQueries{insert: r(tSignalInsert), take: r(tSignalTake), list: r(tSignalList)},
		workflowDef: workflowDefQueries{put: r(tWorkflowDefPut), byDigest: r(tWorkflowDefByDigest), get: r(tWorkflowDefGet),
			listAll: r(tWorkflowDefListAll), listName: r(tWorkflowDefListName)},
		schedule: scheduleQueries{put: r(tSchedulePut), listAll: r(tScheduleListAll), listNames: r(tScheduleListNames), due: r(tScheduleDue), del: r(tScheduleDelete)},
		console:  consoleQueries{insert: r(tSignOutInsert), exists: r(tSignOutExists), deleteExpired: r(tSignOutDeleteExpired)},

		queuePut:            r(tQueuePut),
		queueGet:            r(tQueueGet),
		queueList:           r(tQueueList),
		queueDepth:          r(tQueueDepth),
		publishPrepare:      r(tPublishPrepare),
		dedupeClaim:         r(tDedupeClaim),
		dedupeGet:           r(tDedupeGet),
		publish:             r(tPublish),
		sessionAcceptNamed:  r(tSessionAcceptNamed),
		sessionAcceptNext:   r(tSessionAcceptNext),
		sessionAvailable:    r(tSessionAvailable),
		sessionNextReady:    r(tSessionNextReady),
		sessionExists:       r(tSessionExists),
		sessionRenew:        r(tSessionRenew),
		sessionRelease:      r(tSessionRelease),
		receive:             r(tReceive),
		settleLock:          r(tSettleLock),
		settle:              r(tSettle),
		sessionGet:          r(tSessionGet),
		sessionGetLock:      r(tSessionGetLock),
		sessionList:         r(tSessionList),
		sessionStateSet:     r(tSessionStateSet),
		messagePeek:         r(tMessagePeek),
		deadLetterList:      r(tDeadLetterList),
		sessionLock:         r(tSessionLock),
		resubmit:            r(tResubmit),
		discard:             r(tDiscard),
		dedupeDeleteExpired: r(tDedupeDeleteExpired),
	}
}
