-- Ordered tasks: a task submitted with an ordering key starts only after
-- every task submitted earlier with that key is final.
--
-- ordering_seq is the task's position within its key (NULL without a key).
-- Positions come from ordering_keys, whose row for a key is written by the
-- submitting transaction (OrderingSeqReserve). SQLite has one writer, so
-- positions follow commit order.
ALTER TABLE tasks ADD COLUMN ordering_seq INTEGER;

-- The last position handed out per key.
CREATE TABLE ordering_keys (
    key      TEXT    NOT NULL PRIMARY KEY,
    last_seq INTEGER NOT NULL
) WITHOUT ROWID;

-- The non-final tasks of each key by position: what the claim probes to
-- find out whether an earlier task of the same key is still unfinished.
CREATE INDEX tasks_ordering ON tasks (ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND process_state IN ('Pending','Processing','Compensating');
