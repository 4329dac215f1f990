-- drover state store, version 1.
-- Times are INTEGER microseconds since the Unix epoch (UTC); the v_* views
-- at the end show them as text for people reading the store with plain SQL.

-- One row per task: the pattern's state record (ProcessState, LockedBy,
-- CompleteBy, FailureCount) plus the policy copied from its workflow.
CREATE TABLE tasks (
    id                TEXT    NOT NULL PRIMARY KEY,
    workflow          TEXT    NOT NULL,
    input             BLOB    NOT NULL,
    input_hash        TEXT    NOT NULL,
    process_state     TEXT    NOT NULL CHECK (process_state IN
                        ('Pending','Processing','Processed','Error','Compensating','Compensated','Cancelled')),
    locked_by         TEXT,
    complete_by       INTEGER,
    failure_count     INTEGER NOT NULL DEFAULT 0,
    current_step      INTEGER NOT NULL DEFAULT 0,
    step_count        INTEGER NOT NULL,
    ordering_key      TEXT,
    output            BLOB,
    last_error        TEXT,
    failure_threshold INTEGER NOT NULL,
    on_failure        TEXT    NOT NULL CHECK (on_failure IN ('error','compensate')),
    retry_delay_us    INTEGER NOT NULL DEFAULT 0,
    available_at      INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
) WITHOUT ROWID;

-- What schedulers claim: nobody holds it and it is Pending or waiting to be compensated.
CREATE INDEX tasks_claimable ON tasks (available_at, id)
    WHERE locked_by IS NULL AND process_state IN ('Pending','Compensating');
-- What the supervisor sweeps and what a restarted scheduler resumes.
CREATE INDEX tasks_held ON tasks (complete_by) WHERE locked_by IS NOT NULL;
-- No index on process_state alone: every state change would pay for it.
-- Listing by state scans; the hot paths use the two partial indexes above.

-- One row per step of a task. attempt is the fencing token; idempotency_key
-- never changes after submit.
CREATE TABLE steps (
    task_id            TEXT    NOT NULL,
    step_index         INTEGER NOT NULL,
    name               TEXT    NOT NULL,
    agent              TEXT    NOT NULL,
    timeout_us         INTEGER NOT NULL,
    compensation       TEXT    NOT NULL DEFAULT '',
    process_state      TEXT    NOT NULL,
    compensation_state TEXT    NOT NULL DEFAULT '',
    locked_by          TEXT,
    complete_by        INTEGER,
    failure_count      INTEGER NOT NULL DEFAULT 0,
    attempt            INTEGER NOT NULL DEFAULT 0,
    idempotency_key    TEXT    NOT NULL,
    output             BLOB,
    last_error         TEXT,
    started_at         INTEGER,
    finished_at        INTEGER,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (task_id, step_index)
) WITHOUT ROWID;

-- The request queue: Scheduler → Agent messages. A row lives from dispatch
-- until its reply is applied or the step is recovered.
CREATE TABLE agent_requests (
    id              INTEGER PRIMARY KEY,
    agent           TEXT    NOT NULL,
    task_id         TEXT    NOT NULL,
    step_index      INTEGER NOT NULL,
    attempt         INTEGER NOT NULL,
    kind            TEXT    NOT NULL CHECK (kind IN ('do','compensate')),
    idempotency_key TEXT    NOT NULL,
    complete_by     INTEGER NOT NULL,
    scheduler       TEXT    NOT NULL,
    claimed_by      TEXT,
    created_at      INTEGER NOT NULL
);
CREATE INDEX agent_requests_queue ON agent_requests (agent, id) WHERE claimed_by IS NULL;
CREATE INDEX agent_requests_step ON agent_requests (task_id, step_index);

-- The reply queue: Agent → Scheduler messages from agents whose scheduler
-- runs in another process.
CREATE TABLE agent_replies (
    id         INTEGER PRIMARY KEY,
    task_id    TEXT    NOT NULL,
    step_index INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    output     BLOB,
    failed     INTEGER NOT NULL DEFAULT 0,
    error      TEXT,
    created_at INTEGER NOT NULL
);

-- Append-only history per task; AUTOINCREMENT so an ID is never reused and a
-- subscriber can resume after the last ID it saw.
CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id    TEXT    NOT NULL,
    step_index INTEGER,
    type       TEXT    NOT NULL,
    state      TEXT,
    alert      INTEGER NOT NULL DEFAULT 0,
    actor      TEXT,
    term       INTEGER,
    attempt    INTEGER,
    message    TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX events_task ON events (task_id, id);
CREATE INDEX events_alerts ON events (id) WHERE alert = 1;

-- Leader-election leases; term fences a deposed leader.
CREATE TABLE leases (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    term       INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE VIEW v_tasks AS
SELECT id, workflow, process_state, locked_by,
       strftime('%Y-%m-%dT%H:%M:%fZ', complete_by / 1e6, 'unixepoch') AS complete_by,
       failure_count, current_step, step_count, ordering_key, last_error,
       strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1e6, 'unixepoch') AS created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', updated_at / 1e6, 'unixepoch') AS updated_at
FROM tasks;

CREATE VIEW v_steps AS
SELECT task_id, step_index, name, agent, process_state, compensation_state, locked_by,
       strftime('%Y-%m-%dT%H:%M:%fZ', complete_by / 1e6, 'unixepoch') AS complete_by,
       failure_count, attempt, idempotency_key, last_error
FROM steps;

CREATE VIEW v_events AS
SELECT id, task_id, step_index, type, state, alert, actor, term, attempt, message,
       strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1e6, 'unixepoch') AS created_at
FROM events;
