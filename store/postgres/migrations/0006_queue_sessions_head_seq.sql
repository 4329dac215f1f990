-- A lower bound of the seq of the session's messages not dead: every lookup
-- of a session's head starts its scan of the primary key of queue_messages
-- there, past the index entries of messages completed (deleted, not yet
-- vacuumed) or dead-lettered before. Raised to seq + 1 when the head is
-- completed or dead-lettered, lowered when a dead letter is resubmitted (see
-- queue_queries.go). Not indexed, so the updates of the session row stay HOT.
-- Existing sessions get 0, a valid bound.
ALTER TABLE queue_sessions ADD COLUMN head_seq bigint NOT NULL DEFAULT 0;
