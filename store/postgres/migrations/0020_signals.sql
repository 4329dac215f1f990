-- Signal steps: the signal a step waits for ('' for an agent's step) and
-- the output its deadline completes it with (NULL: the deadline fails it).
-- Constant defaults: no table rewrite.
ALTER TABLE steps ADD COLUMN signal_name text NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN signal_default bytea;

-- Signals sent to tasks, kept until the task is deleted: one sent before
-- its step waits is consumed when the step gets there, oldest first (seq);
-- the unique key ignores a signal sent again with the same ID.
CREATE TABLE signals (
    seq              bigserial   PRIMARY KEY,
    task_id          text COLLATE "C" NOT NULL,
    name             text        NOT NULL,
    signal_id        text        NOT NULL,
    payload          bytea,
    sender           text        NOT NULL DEFAULT '',
    received_at      timestamptz NOT NULL,
    consumed_at      timestamptz,
    consumed_step    integer,
    consumed_attempt integer,
    UNIQUE (task_id, name, signal_id)
);
-- The signals a step can still take, oldest first.
CREATE INDEX signals_waiting ON signals (task_id, name, seq) WHERE consumed_at IS NULL;
