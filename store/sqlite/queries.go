package sqlite

// The SQL of the SQLite driver. Hot-path statements are prepared once per
// driver (see hotQueries); the rest run unprepared.

// Column lists shared by the task and step queries.
const taskCols = `id, workflow, input, input_hash, process_state, locked_by, complete_by, failure_count,
 current_step, step_count, ordering_key, output, last_error, failure_threshold, on_failure,
 retry_delay_us, available_at, created_at, updated_at, ordering_seq, workflow_version, callback_url,
 wait_max, wait_delay_us, wait_multiplier, wait_max_delay_us, callback_events, submitter, trace_context, priority`
const stepCols = `task_id, step_index, name, agent, timeout_us, compensation, process_state, compensation_state,
 locked_by, complete_by, failure_count, attempt, idempotency_key, output, last_error, started_at, finished_at, updated_at,
 on_failure, wait_max, wait_delay_us, wait_multiplier, wait_max_delay_us, signal_name, signal_default, step_group, finish_seq`

// previousOutput is the previous output of request r of step s: its own
// when it carries one (a parallel group's branch or the step after a
// group), else the output of step p, the one before.
const previousOutput = `CASE WHEN r.previous_own <> 0 THEN r.previous_output ELSE p.output END`

const (
	// qTaskPickFinished feeds retention: final tasks, oldest first, through
	// the tasks_finished partial index.
	qTaskPickFinished = `SELECT id, ordering_key FROM tasks INDEXED BY tasks_finished
 WHERE process_state IN ('Processed','Error','Compensated','Cancelled') AND updated_at < ?
 ORDER BY updated_at LIMIT ?`
	// qTaskFinishedSince feeds the console's charts: the newest final
	// tasks, through the same index.
	qTaskFinishedSince = `SELECT process_state, created_at, updated_at FROM tasks INDEXED BY tasks_finished
 WHERE process_state IN ('Processed','Error','Compensated','Cancelled') AND updated_at >= ?
 ORDER BY updated_at DESC LIMIT ?`
	qDeleteEvents = `DELETE FROM events WHERE task_id IN (SELECT value FROM json_each(?))`
	// qEventLastID is the highest event row ID AUTOINCREMENT ever handed
	// out (0 for none); the driver gives new rows IDs above it.
	qEventLastID    = `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)`
	qDeleteRequests = `DELETE FROM agent_requests WHERE task_id IN (SELECT value FROM json_each(?))`
	qDeleteReplies  = `DELETE FROM agent_replies WHERE task_id IN (SELECT value FROM json_each(?))`
	qDeleteSignals  = `DELETE FROM signals WHERE task_id IN (SELECT value FROM json_each(?))`
	qDeleteSteps    = `DELETE FROM steps WHERE task_id IN (SELECT value FROM json_each(?))`
	qDeleteTasks    = `DELETE FROM tasks WHERE id IN (SELECT value FROM json_each(?))`

	// qOrderingPrune deletes the keys of the JSON list left without tasks
	// (triggers on tasks count them).
	qOrderingPrune = `DELETE FROM ordering_keys WHERE key IN (SELECT value FROM json_each(?)) AND task_count <= 0`

	// qTaskCountActive counts through the two partial indexes, so its cost
	// follows the active tasks, not the table.
	qTaskCountActive = `SELECT (SELECT count(*) FROM tasks INDEXED BY tasks_claimable
   WHERE locked_by IS NULL AND process_state IN ('Pending','Compensating'))
 + (SELECT count(*) FROM tasks INDEXED BY tasks_held WHERE locked_by IS NOT NULL)`

	// qTaskCountActiveIn counts a namespace's tasks (?1, ?2: its
	// store.NamespaceRange) on tasks_namespace_active, whose condition it
	// repeats so that SQLite may use it.
	qTaskCountActiveIn = `SELECT count(*) FROM tasks INDEXED BY tasks_namespace_active
 WHERE id >= ? AND id < ? AND instr(id, '/') > 0 AND process_state IN ('Pending','Processing','Compensating')`

	// qTaskCountActiveBySubmitter counts through tasks_submitter_active.
	qTaskCountActiveBySubmitter = `SELECT count(*) FROM tasks INDEXED BY tasks_submitter_active
 WHERE submitter = ? AND submitter <> '' AND process_state IN ('Pending','Processing','Compensating')`

	qTaskGet = `SELECT ` + taskCols + ` FROM tasks WHERE id = ?`

	qTaskGetMany = `SELECT ` + taskCols + ` FROM tasks WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`

	qTaskCountByState = `SELECT process_state, count(*) FROM tasks GROUP BY process_state`

	qTaskCountLockedBy = `SELECT count(*) FROM tasks WHERE locked_by = ? AND complete_by IS NOT NULL`

	// qTaskClaim walks tasks_claimable in claim order (claim_at: priority,
	// then how long a task waited). claim_at is never after available_at,
	// so the walk ends at now; the tasks it passes that are not available
	// yet are delayed ones of raised priority due within their lead. A
	// Pending task with an ordering key is skipped while an earlier task of
	// its key is not final: one probe of the tasks_ordering partial index
	// per such candidate.
	qTaskClaim = `UPDATE tasks SET locked_by = ?1,
   process_state = CASE process_state WHEN 'Pending' THEN 'Processing' ELSE process_state END,
   updated_at = ?2
 WHERE id IN (SELECT c.id FROM tasks AS c INDEXED BY tasks_claimable
   WHERE c.locked_by IS NULL AND c.process_state IN ('Pending','Compensating') AND c.claim_at <= ?2
     AND c.available_at <= ?2 AND (c.claim_at > ?4 OR (c.claim_at = ?4 AND c.id > ?5))
     AND ` + orderingFree + `
   ORDER BY c.claim_at, c.id LIMIT ?3)
 RETURNING ` + taskCols

	// qTaskNextAvailable finds the first claimable task not yet available in
	// claim order (?2 is Now less the longest lead a priority gives), then
	// the earliest available_at among the tasks up to that lead (?3) after
	// it, at most ?4: a higher priority's task comes earlier in claim order
	// than in time; and, with ?5 (TaskNextAvailableParams.Due), whether a
	// task is claimable now (d). All three walk tasks_claimable.
	qTaskNextAvailable = `WITH f AS (
   SELECT c.claim_at FROM tasks AS c INDEXED BY tasks_claimable
   WHERE c.locked_by IS NULL AND c.process_state IN ('Pending','Compensating') AND c.claim_at > ?2 AND c.available_at > ?1
   ORDER BY c.claim_at, c.id LIMIT 1),
 w AS (
   SELECT c.available_at FROM f, tasks AS c INDEXED BY tasks_claimable
   WHERE c.locked_by IS NULL AND c.process_state IN ('Pending','Compensating')
     AND c.claim_at >= f.claim_at AND c.claim_at <= f.claim_at + ?3 AND c.available_at > ?1
   ORDER BY c.claim_at, c.id LIMIT ?4)
,
 d AS (
   SELECT 1 FROM tasks AS c INDEXED BY tasks_claimable
   WHERE ?5 AND c.locked_by IS NULL AND c.process_state IN ('Pending','Compensating') AND c.claim_at <= ?1 AND c.available_at <= ?1
     AND ` + orderingFree + `
   ORDER BY c.claim_at, c.id LIMIT 1)
 SELECT (SELECT claim_at FROM f), (SELECT min(available_at) FROM w), (SELECT count(*) FROM w), EXISTS (SELECT 1 FROM d)`

	qTaskListLockedBy = `SELECT ` + taskCols + ` FROM tasks WHERE locked_by = ? AND complete_by IS NOT NULL ORDER BY id LIMIT ?`

	qTaskListExpired = `SELECT ` + taskCols + ` FROM tasks
 WHERE locked_by IS NOT NULL AND complete_by < ? ORDER BY complete_by LIMIT ?`

	qStepListOne = `SELECT ` + stepCols + ` FROM steps WHERE task_id = ? ORDER BY step_index`

	qStepListMany = `SELECT ` + stepCols + ` FROM steps WHERE task_id IN (SELECT value FROM json_each(?))
 ORDER BY task_id, step_index`

	qRequestClaim = `UPDATE agent_requests SET claimed_by = ?1
 WHERE id IN (SELECT id FROM agent_requests WHERE agent = ?2 AND claimed_by IS NULL AND complete_by > ?3
   AND (available_at IS NULL OR available_at <= ?3) ORDER BY id LIMIT ?4)
 RETURNING id, agent, task_id, step_index, attempt, kind, idempotency_key, complete_by, scheduler, created_at`

	// qRequestPayload joins the message body into claimed requests: the
	// task's input, the step's own output (for compensation) and the output
	// of the step before.
	qRequestPayload = `SELECT r.id, t.workflow, t.input, s.name, s.output, ` + previousOutput + `, t.trace_context
 FROM agent_requests r
 JOIN tasks t ON t.id = r.task_id
 JOIN steps s ON s.task_id = r.task_id AND s.step_index = r.step_index
 LEFT JOIN steps p ON p.task_id = r.task_id AND p.step_index = r.step_index - 1
 WHERE r.id IN (SELECT value FROM json_each(?))`

	qStepRequestExists = `SELECT EXISTS (SELECT 1 FROM agent_requests WHERE task_id = ? AND step_index = ? AND attempt = ? AND kind = ?)`
	// qStepRepliesOf: agent_replies has no index but its queue's order, so
	// the replies of many tasks are found in one scan, not one per step.
	qStepRepliesOf = `SELECT task_id, step_index, attempt, kind FROM agent_replies WHERE task_id IN (SELECT value FROM json_each(?))`

	qRequestRelease = `UPDATE agent_requests SET claimed_by = NULL WHERE claimed_by = ?`

	qRequestDeleteExpired = `DELETE FROM agent_requests WHERE id IN
 (SELECT id FROM agent_requests WHERE complete_by < ? ORDER BY id LIMIT ?)`

	qReplyTake = `DELETE FROM agent_replies WHERE id IN (
   SELECT r.id FROM agent_replies r LEFT JOIN tasks t ON t.id = r.task_id
   WHERE t.locked_by = ? OR t.locked_by IS NULL ORDER BY r.id LIMIT ?)
 RETURNING id, task_id, step_index, attempt, kind, output, failed, error, created_at`

	qLeaseAcquire = `INSERT INTO leases (name, holder, term, expires_at) VALUES (?1, ?2, 1, ?4)
 ON CONFLICT (name) DO UPDATE SET
   term = CASE WHEN leases.holder = ?2 THEN leases.term ELSE leases.term + 1 END,
   holder = ?2, expires_at = ?4
 WHERE leases.holder = ?2 OR leases.expires_at <= ?3
 RETURNING name, holder, term, expires_at`

	qLeaseList = `SELECT name, holder, term, expires_at FROM leases
 WHERE substr(name, 1, length(?1)) = ?1 AND expires_at > ?2 ORDER BY name LIMIT ?3`

	qLeaseGet = `SELECT name, holder, term, expires_at FROM leases WHERE name = ?`

	qLeaseRelease = `UPDATE leases SET expires_at = 0 WHERE name = ? AND holder = ? AND term = ?`
)

// Multi-row statements: see multiRow. Blobs are bound as []byte.
var (
	mTaskInsert = newMultiRow(`INSERT INTO tasks (`+taskCols+`, claim_at) VALUES `,
		`(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, ` ON CONFLICT (id) DO NOTHING RETURNING id`)
	// mOrderingReserve moves each key's last position on by the number of
	// positions wanted (column 2) and returns the new last position; a new
	// key starts at 0. Keys within one statement are distinct.
	mOrderingReserve = newMultiRow(`INSERT INTO ordering_keys (key, last_seq) VALUES `, `(?,?)`,
		` ON CONFLICT (key) DO UPDATE SET last_seq = ordering_keys.last_seq + excluded.last_seq RETURNING key, last_seq`)
	mTaskUpdate = newMultiRow(`UPDATE tasks SET process_state = u.column2, locked_by = u.column3,
 complete_by = u.column4, failure_count = u.column5, current_step = u.column6, output = u.column7,
 last_error = u.column8, available_at = u.column9, updated_at = u.column10, claim_at = u.column11 FROM (VALUES `,
		`(?,?,?,?,?,?,?,?,?,?,?)`, `) AS u WHERE tasks.id = u.column1`)
	mStepInsert = newMultiRow(`INSERT INTO steps (`+stepCols+`) VALUES `,
		`(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, "")
	mStepUpdate = newMultiRow(`UPDATE steps SET process_state = u.column3, compensation_state = u.column4,
 locked_by = u.column5, complete_by = u.column6, failure_count = u.column7, attempt = u.column8,
 output = u.column9, last_error = u.column10, started_at = u.column11, finished_at = u.column12,
 updated_at = u.column13, idempotency_key = u.column14, finish_seq = u.column15 FROM (VALUES `,
		`(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, `) AS u WHERE steps.task_id = u.column1 AND steps.step_index = u.column2`)
	mRequestInsert = newMultiRow(`INSERT INTO agent_requests (agent, task_id, step_index, attempt, kind,
 idempotency_key, complete_by, scheduler, claimed_by, created_at, previous_own, previous_output) VALUES `,
		`(?,?,?,?,?,?,?,?,?,?,?,?)`, "")
	mRequestDeleteByStep = newMultiRow(`DELETE FROM agent_requests WHERE (task_id, step_index) IN (VALUES `,
		`(?,?)`, `)`)
	mEventInsert = newMultiRow(`INSERT INTO events (id, task_id, step_index, event_type, state, alert, actor, term,
 attempt, message, created_at, namespace, more) VALUES `,
		`(?,?,?,?,?,?,?,?,?,?,?,?,?)`, "")
	mReplyInsert = newMultiRow(`INSERT INTO agent_replies (task_id, step_index, attempt, kind, output, failed,
 error, created_at) VALUES `,
		`(?,?,?,?,?,?,?,?)`, "")

	multiRows = []multiRow{mTaskInsert, mOrderingReserve, mTaskUpdate, mStepInsert, mStepUpdate, mRequestInsert,
		mRequestDeleteByStep, mEventInsert, mReplyInsert}
)

// hotQueries run on every scheduler, agent or supervisor cycle. Each is
// prepared after the first transaction of the driver that runs it
// (Driver.prepare).
var hotQueries = append([]string{qTaskGet, qTaskGetMany, qTaskCountByState, qTaskCountLockedBy, qTaskClaim, qTaskListLockedBy, qTaskListExpired, qStepListOne, qStepListMany, qRequestClaim, qRequestPayload, qRequestRelease, qRequestDeleteExpired, qReplyTake, qLeaseAcquire, qLeaseGet, qLeaseRelease, qEventLastID}, allMultiRowSizes()...)

func allMultiRowSizes() []string {
	var out []string
	for _, m := range multiRows {
		out = append(out, m.allSizes()...)
	}
	return out
}

// orderingFree holds for a task c of tasks that its ordering key does not
// hold back: a Pending task with a key waits while an earlier task of its
// key is not final.
const orderingFree = `(c.ordering_key IS NULL OR c.process_state = 'Compensating' OR NOT EXISTS (
       SELECT 1 FROM tasks AS p INDEXED BY tasks_ordering
       WHERE p.ordering_key = c.ordering_key AND p.ordering_seq < c.ordering_seq
         AND p.process_state IN ('Pending','Processing','Compensating')))`
