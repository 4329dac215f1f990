-- Recurring schedules: each one's definition (from the configuration of
-- the processes that run it) and its next due time. The leader submits a
-- due time's task and advances next_due in one transaction; the task's ID
-- derives from the name and the due time, so a due time is submitted once.
-- Times are microseconds since the Unix epoch; every_us is 0 with a cron.
CREATE TABLE schedules (
    name       TEXT    NOT NULL PRIMARY KEY,
    workflow   TEXT    NOT NULL,
    input      BLOB    NOT NULL,
    cron       TEXT    NOT NULL DEFAULT '',
    time_zone  TEXT    NOT NULL DEFAULT '',
    every_us   INTEGER NOT NULL DEFAULT 0,
    catch_up   TEXT    NOT NULL,
    paused     INTEGER NOT NULL DEFAULT 0,
    next_due   INTEGER NOT NULL,
    last_due   INTEGER,
    last_task  TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
-- What the leader fires.
CREATE INDEX schedules_due ON schedules (next_due, name) WHERE paused = 0;

CREATE VIEW v_schedules AS
SELECT name, workflow, cron, time_zone, every_us, catch_up, paused,
       strftime('%Y-%m-%dT%H:%M:%fZ', next_due / 1e6, 'unixepoch') AS next_due,
       strftime('%Y-%m-%dT%H:%M:%fZ', last_due / 1e6, 'unixepoch') AS last_due,
       last_task,
       strftime('%Y-%m-%dT%H:%M:%fZ', updated_at / 1e6, 'unixepoch') AS updated_at
FROM schedules;
