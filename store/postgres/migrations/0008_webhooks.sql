-- Webhooks on final states: a cursor over the event history and
-- the durable delivery queue. Same tables as the SQLite store.
--
-- webhook_cursor has one row: the ID of the last event the enqueuers
-- scanned. It starts at the highest event ID recorded when this migration
-- runs, so the history of an upgraded store is not sent; a new store starts
-- at 0 and misses nothing, however late its first dispatcher starts.
-- Enqueuers lock the row (FOR UPDATE SKIP LOCKED): one enqueues at a time,
-- the others skip the round. A read of the events returns no ID while a
-- lower one may still commit (see doc.go), so scanning by ID after the
-- cursor misses none.
CREATE TABLE webhook_cursor (
    id            integer NOT NULL PRIMARY KEY CHECK (id = 1),
    last_event_id bigint  NOT NULL
);
INSERT INTO webhook_cursor (id, last_event_id) SELECT 1, coalesce(max(id), 0) FROM events;

-- One row per (final-state event, URL). The payload is built once, so every
-- attempt sends the same body. next_attempt_at is when the delivery is due;
-- while an attempt is in flight (claimed_by set) it is the end of the
-- claim's lease. A delivery is pending until delivered_at or failed_at is set.
CREATE TABLE webhook_deliveries (
    id              bigserial   PRIMARY KEY,
    event_id        bigint      NOT NULL,
    url             text        NOT NULL,
    task_id         text COLLATE "C" NOT NULL,
    event_type      text        NOT NULL,
    payload         bytea       NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    claimed_by      text,
    delivered_at    timestamptz,
    failed_at       timestamptz,
    last_error      text        NOT NULL DEFAULT '',
    last_status     integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    UNIQUE (event_id, url)
);
-- What dispatchers claim (SKIP LOCKED).
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
-- What a restarted dispatcher releases.
CREATE INDEX webhook_deliveries_claimed ON webhook_deliveries (claimed_by) WHERE claimed_by IS NOT NULL;
-- What pruning deletes.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (updated_at)
    WHERE delivered_at IS NOT NULL OR failed_at IS NOT NULL;
-- A task's deliveries, for operators.
CREATE INDEX webhook_deliveries_task ON webhook_deliveries (task_id, id);

CREATE VIEW v_webhook_deliveries AS
SELECT id, event_id, url, task_id, event_type,
       CASE WHEN delivered_at IS NOT NULL THEN 'delivered' WHEN failed_at IS NOT NULL THEN 'failed' ELSE 'pending' END AS status,
       attempts, claimed_by, last_status, last_error, next_attempt_at, delivered_at, failed_at, created_at
FROM webhook_deliveries;
