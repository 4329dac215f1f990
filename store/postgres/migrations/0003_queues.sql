-- Session queues (the Sequential Convoy pattern): see docs/convoy-design.md.
-- Same logical schema as the SQLite store; applied with search_path set to
-- the driver's schema, so nothing here names a schema. Keys use the "C"
-- collation, as in 0001. Durations are bigint microseconds.

-- One row per queue: its policy. Created with the defaults on first publish.
CREATE TABLE queues (
    name               text COLLATE "C" NOT NULL PRIMARY KEY,
    max_delivery_count integer     NOT NULL DEFAULT 10,
    poison_policy      text        NOT NULL DEFAULT 'block' CHECK (poison_policy IN ('block','skip')),
    dedupe_window_us   bigint      NOT NULL DEFAULT 600000000,
    lock_duration_us   bigint      NOT NULL DEFAULT 30000000,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);

-- One row per session, created on its first publish. next_seq is the last
-- sequence number assigned; pending counts the messages neither completed nor
-- dead; ready_at is the available time of the head message (NULL: nothing
-- pending). lock_token counts accepts: every call under a lock names it.
-- Publishing locks the row (INSERT … ON CONFLICT DO UPDATE) until commit, so
-- sequence numbers follow commit order. Rows are updated constantly: leave
-- room for HOT updates.
CREATE TABLE queue_sessions (
    queue        text COLLATE "C" NOT NULL,
    session_id   text COLLATE "C" NOT NULL,
    next_seq     bigint      NOT NULL DEFAULT 0,
    pending      bigint      NOT NULL DEFAULT 0,
    ready_at     timestamptz,
    lock_holder  text,
    lock_token   bigint      NOT NULL DEFAULT 0,
    locked_until timestamptz,
    state        bytea,
    closed       boolean     NOT NULL DEFAULT false,
    blocked      boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (queue, session_id)
) WITH (fillfactor = 80);
-- What accept scans: sessions with something pending and not blocked, oldest
-- head first, ties by ID.
CREATE INDEX queue_sessions_ready ON queue_sessions (queue, ready_at, session_id)
    WHERE ready_at IS NOT NULL AND NOT blocked;

-- Messages. Completed ones are deleted; dead-lettered ones stay with dead.
-- The head of a session is its message that is not dead with the smallest seq.
CREATE TABLE queue_messages (
    queue           text COLLATE "C" NOT NULL,
    session_id      text COLLATE "C" NOT NULL,
    seq             bigint      NOT NULL,
    message_id      text,
    body            bytea       NOT NULL,
    delivery_count  integer     NOT NULL DEFAULT 0,
    end_of_sequence boolean     NOT NULL DEFAULT false,
    available_at    timestamptz NOT NULL,
    dead            boolean     NOT NULL DEFAULT false,
    dead_reason     text,
    dead_at         timestamptz,
    enqueued_at     timestamptz NOT NULL,
    PRIMARY KEY (queue, session_id, seq)
) WITH (fillfactor = 90);
-- The dead-letter list.
CREATE INDEX queue_messages_dead ON queue_messages (queue, session_id, seq) WHERE dead;

-- Message IDs seen within their queue's dedupe window, and the sequence
-- number the original got.
CREATE TABLE queue_dedupe (
    queue      text COLLATE "C" NOT NULL,
    message_id text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    seq        bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, message_id)
);
CREATE INDEX queue_dedupe_expires ON queue_dedupe (expires_at);

CREATE VIEW v_queue_sessions AS
SELECT queue, session_id, next_seq, pending, ready_at, lock_holder, lock_token, locked_until,
       closed, blocked, updated_at
FROM queue_sessions;

CREATE VIEW v_queue_messages AS
SELECT queue, session_id, seq, message_id, length(body) AS body_bytes, delivery_count, end_of_sequence,
       available_at, dead, dead_reason, dead_at, enqueued_at
FROM queue_messages;
