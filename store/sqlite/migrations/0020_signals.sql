-- Signal steps: the signal a step waits for ('' for an agent's step) and
-- the output its deadline completes it with (NULL: the deadline fails it).
ALTER TABLE steps ADD COLUMN signal_name TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN signal_default BLOB;

-- Signals sent to tasks, kept until the task is deleted: one sent before
-- its step waits is consumed when the step gets there, oldest first (seq);
-- the unique key ignores a signal sent again with the same ID.
CREATE TABLE signals (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id          TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    signal_id        TEXT    NOT NULL,
    payload          BLOB,
    sender           TEXT    NOT NULL DEFAULT '',
    received_at      INTEGER NOT NULL,
    consumed_at      INTEGER,
    consumed_step    INTEGER,
    consumed_attempt INTEGER,
    UNIQUE (task_id, name, signal_id)
);
-- The signals a step can still take, oldest first.
CREATE INDEX signals_waiting ON signals (task_id, name, seq) WHERE consumed_at IS NULL;
