-- Ordered tasks: a task submitted with an ordering key starts only after
-- every task submitted earlier with that key is final.
--
-- ordering_seq is the task's position within its key (NULL without a key).
-- Positions come from ordering_keys: the submitting transaction upserts the
-- key's row (OrderingSeqReserve) and holds its row lock until it commits,
-- so a second submitter of the same key waits, and positions follow commit
-- order (see doc.go).
ALTER TABLE tasks ADD COLUMN ordering_seq bigint;

-- The last position handed out per key. "C" collation: keys compare as
-- bytes, like the driver sorts them before locking.
CREATE TABLE ordering_keys (
    key      text COLLATE "C" NOT NULL PRIMARY KEY,
    last_seq bigint NOT NULL
);

-- The non-final tasks of each key by position: what the claim probes to
-- find out whether an earlier task of the same key is still unfinished.
CREATE INDEX tasks_ordering ON tasks (ordering_key, ordering_seq)
    WHERE ordering_key IS NOT NULL AND process_state IN ('Pending','Processing','Compensating');
