-- drover state store for PostgreSQL, version 1.
--
-- The migration runner applies this file with search_path set to the
-- driver's schema (Options.Schema, default "drover"), so every object below
-- is created there and nothing here names a schema.
--
-- Same logical schema as the SQLite driver (same tables, columns and partial
-- indexes), with PostgreSQL types: timestamptz for times (microseconds, as
-- the driver passes them), bytea for payloads, boolean flags, bigserial IDs.
-- IDs use the "C" collation so ordering and keyset pagination compare bytes,
-- as SQLite does, whatever the database's default collation.

-- One row per task: the pattern's state record (ProcessState, LockedBy,
-- CompleteBy, FailureCount) plus the policy copied from its workflow.
CREATE TABLE tasks (
    id                text COLLATE "C" NOT NULL PRIMARY KEY,
    workflow          text        NOT NULL,
    input             bytea       NOT NULL,
    input_hash        text        NOT NULL,
    process_state     text        NOT NULL CHECK (process_state IN
                        ('Pending','Processing','Processed','Error','Compensating','Compensated','Cancelled')),
    locked_by         text,
    complete_by       timestamptz,
    failure_count     integer     NOT NULL DEFAULT 0,
    current_step      integer     NOT NULL DEFAULT 0,
    step_count        integer     NOT NULL,
    ordering_key      text,
    output            bytea,
    last_error        text,
    failure_threshold integer     NOT NULL,
    on_failure        text        NOT NULL CHECK (on_failure IN ('error','compensate')),
    retry_delay_us    bigint      NOT NULL DEFAULT 0,
    available_at      timestamptz NOT NULL,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
) WITH (fillfactor = 90);

-- What schedulers claim: nobody holds it and it is Pending or waiting to be compensated.
CREATE INDEX tasks_claimable ON tasks (available_at, id)
    WHERE locked_by IS NULL AND process_state IN ('Pending','Compensating');
-- What the supervisor sweeps and what a restarted scheduler resumes.
CREATE INDEX tasks_held ON tasks (complete_by) WHERE locked_by IS NOT NULL;
-- No index on process_state alone: every state change would pay for it.
-- Listing by state scans; the hot paths use the two partial indexes above.

-- One row per step of a task. attempt is the fencing token; idempotency_key
-- never changes after submit. Updates touch no indexed column, so with the
-- free space fillfactor leaves they are HOT updates.
CREATE TABLE steps (
    task_id            text COLLATE "C" NOT NULL,
    step_index         integer     NOT NULL,
    name               text        NOT NULL,
    agent              text        NOT NULL,
    timeout_us         bigint      NOT NULL,
    compensation       text        NOT NULL DEFAULT '',
    process_state      text        NOT NULL CHECK (process_state IN
                         ('Pending','Processing','Processed','Error','Compensating','Compensated','Cancelled')),
    compensation_state text        NOT NULL DEFAULT '' CHECK (compensation_state IN
                         ('','Pending','Processing','Processed','Error','Compensating','Compensated','Cancelled')),
    locked_by          text,
    complete_by        timestamptz,
    failure_count      integer     NOT NULL DEFAULT 0,
    attempt            integer     NOT NULL DEFAULT 0,
    idempotency_key    text        NOT NULL,
    output             bytea,
    last_error         text,
    started_at         timestamptz,
    finished_at        timestamptz,
    updated_at         timestamptz NOT NULL,
    PRIMARY KEY (task_id, step_index)
) WITH (fillfactor = 90);

-- The request queue: Scheduler → Agent messages. A row lives from dispatch
-- until its reply is applied or the step is recovered.
CREATE TABLE agent_requests (
    id              bigserial   PRIMARY KEY,
    agent           text        NOT NULL,
    task_id         text COLLATE "C" NOT NULL,
    step_index      integer     NOT NULL,
    attempt         integer     NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('do','compensate')),
    idempotency_key text        NOT NULL,
    complete_by     timestamptz NOT NULL,
    scheduler       text        NOT NULL,
    claimed_by      text,
    created_at      timestamptz NOT NULL
);
CREATE INDEX agent_requests_queue ON agent_requests (agent, id) WHERE claimed_by IS NULL;
CREATE INDEX agent_requests_step ON agent_requests (task_id, step_index);

-- The reply queue: Agent → Scheduler messages from agents whose scheduler
-- runs in another process.
CREATE TABLE agent_replies (
    id         bigserial   PRIMARY KEY,
    task_id    text COLLATE "C" NOT NULL,
    step_index integer     NOT NULL,
    attempt    integer     NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('do','compensate')),
    output     bytea,
    failed     boolean     NOT NULL DEFAULT false,
    error      text,
    created_at timestamptz NOT NULL
);

-- Append-only history per task. A sequence never hands an ID out twice, and
-- a read of the driver returns no ID while a lower one may still commit
-- (see doc.go), so a subscriber can resume after the last ID it saw. The
-- sequence must keep CACHE 1: with per-session caches, a writer could take
-- an ID below the last value a reader has seen.
CREATE TABLE events (
    id         bigserial   PRIMARY KEY,
    task_id    text COLLATE "C" NOT NULL,
    step_index integer,
    type       text        NOT NULL,
    state      text,
    alert      boolean     NOT NULL DEFAULT false,
    actor      text,
    term       bigint,
    attempt    integer,
    message    text,
    created_at timestamptz NOT NULL
);
CREATE INDEX events_task ON events (task_id, id);
CREATE INDEX events_alerts ON events (id) WHERE alert;

-- Leader-election leases; term fences a deposed leader.
CREATE TABLE leases (
    name       text        NOT NULL PRIMARY KEY,
    holder     text        NOT NULL,
    term       bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The same operator views as the SQLite store, so the queries in
-- docs/architecture.md work on both (times are already readable here).
CREATE VIEW v_tasks AS
SELECT id, workflow, process_state, locked_by, complete_by, failure_count, current_step, step_count,
       ordering_key, last_error, created_at, updated_at
FROM tasks;

CREATE VIEW v_steps AS
SELECT task_id, step_index, name, agent, process_state, compensation_state, locked_by, complete_by,
       failure_count, attempt, idempotency_key, last_error
FROM steps;

CREATE VIEW v_events AS
SELECT id, task_id, step_index, type, state, alert, actor, term, attempt, message, created_at
FROM events;
