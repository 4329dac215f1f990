-- Session queues (the Sequential Convoy pattern): see docs/convoy-design.md.
-- Times are INTEGER microseconds since the Unix epoch, durations *_us
-- microseconds, flags INTEGER 0/1, as in 0001.

-- One row per queue: its policy. Created with the defaults on first publish.
CREATE TABLE queues (
    name               TEXT    NOT NULL PRIMARY KEY,
    max_delivery_count INTEGER NOT NULL DEFAULT 10,
    poison_policy      TEXT    NOT NULL DEFAULT 'block' CHECK (poison_policy IN ('block','skip')),
    dedupe_window_us   INTEGER NOT NULL DEFAULT 600000000,
    lock_duration_us   INTEGER NOT NULL DEFAULT 30000000,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per session, created on its first publish. next_seq is the last
-- sequence number assigned; pending counts the messages neither completed nor
-- dead; ready_at is the available time of the head message (NULL: nothing
-- pending). lock_token counts accepts: every call under a lock names it.
CREATE TABLE queue_sessions (
    queue        TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    next_seq     INTEGER NOT NULL DEFAULT 0,
    pending      INTEGER NOT NULL DEFAULT 0,
    ready_at     INTEGER,
    lock_holder  TEXT,
    lock_token   INTEGER NOT NULL DEFAULT 0,
    locked_until INTEGER,
    state        BLOB,
    closed       INTEGER NOT NULL DEFAULT 0,
    blocked      INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (queue, session_id)
) WITHOUT ROWID;
-- What accept scans: sessions with something pending and not blocked, oldest
-- head first (the primary key follows ready_at in the index: ties by ID).
CREATE INDEX queue_sessions_ready ON queue_sessions (queue, ready_at)
    WHERE ready_at IS NOT NULL AND blocked = 0;

-- Messages. Completed ones are deleted; dead-lettered ones stay with dead = 1.
-- The head of a session is its message with dead = 0 and the smallest seq.
CREATE TABLE queue_messages (
    queue           TEXT    NOT NULL,
    session_id      TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    message_id      TEXT,
    body            BLOB    NOT NULL,
    delivery_count  INTEGER NOT NULL DEFAULT 0,
    end_of_sequence INTEGER NOT NULL DEFAULT 0,
    available_at    INTEGER NOT NULL,
    dead            INTEGER NOT NULL DEFAULT 0,
    dead_reason     TEXT,
    dead_at         INTEGER,
    enqueued_at     INTEGER NOT NULL,
    PRIMARY KEY (queue, session_id, seq)
) WITHOUT ROWID;
-- The dead-letter list.
CREATE INDEX queue_messages_dead ON queue_messages (queue, session_id, seq) WHERE dead = 1;

-- Message IDs seen within their queue's dedupe window, and the sequence
-- number the original got.
CREATE TABLE queue_dedupe (
    queue      TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, message_id)
) WITHOUT ROWID;
CREATE INDEX queue_dedupe_expires ON queue_dedupe (expires_at);

CREATE VIEW v_queue_sessions AS
SELECT queue, session_id, next_seq, pending,
       strftime('%Y-%m-%dT%H:%M:%fZ', ready_at / 1e6, 'unixepoch') AS ready_at,
       lock_holder, lock_token,
       strftime('%Y-%m-%dT%H:%M:%fZ', locked_until / 1e6, 'unixepoch') AS locked_until,
       closed, blocked,
       strftime('%Y-%m-%dT%H:%M:%fZ', updated_at / 1e6, 'unixepoch') AS updated_at
FROM queue_sessions;

CREATE VIEW v_queue_messages AS
SELECT queue, session_id, seq, message_id, length(body) AS body_bytes, delivery_count, end_of_sequence,
       strftime('%Y-%m-%dT%H:%M:%fZ', available_at / 1e6, 'unixepoch') AS available_at,
       dead, dead_reason,
       strftime('%Y-%m-%dT%H:%M:%fZ', dead_at / 1e6, 'unixepoch') AS dead_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', enqueued_at / 1e6, 'unixepoch') AS enqueued_at
FROM queue_messages;
