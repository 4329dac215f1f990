-- Recurring schedules: each one's definition (from the configuration of
-- the processes that run it) and its next due time. The leader submits a
-- due time's task and advances next_due in one transaction, with the rows
-- it fires locked (FOR UPDATE); the task's ID derives from the name and
-- the due time, so a due time is submitted once. every_us is 0 with a
-- cron. Same table as the SQLite store.
CREATE TABLE schedules (
    name       text COLLATE "C" NOT NULL PRIMARY KEY,
    workflow   text        NOT NULL,
    input      bytea       NOT NULL,
    cron       text        NOT NULL DEFAULT '',
    time_zone  text        NOT NULL DEFAULT '',
    every_us   bigint      NOT NULL DEFAULT 0,
    catch_up   text        NOT NULL,
    paused     boolean     NOT NULL DEFAULT false,
    next_due   timestamptz NOT NULL,
    last_due   timestamptz,
    last_task  text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
-- What the leader fires.
CREATE INDEX schedules_due ON schedules (next_due, name) WHERE NOT paused;

CREATE VIEW v_schedules AS
SELECT name, workflow, cron, time_zone, every_us, catch_up, paused, next_due, last_due, last_task, updated_at
FROM schedules;
