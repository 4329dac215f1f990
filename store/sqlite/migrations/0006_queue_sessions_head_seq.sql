-- Migration 6 of the PostgreSQL store adds queue_sessions.head_seq, a lower
-- bound where lookups of a session's head start, so they skip the index
-- entries of deleted messages that PostgreSQL keeps until VACUUM. SQLite
-- removes a deleted row's index entries at once: nothing to do (the version
-- is kept so both drivers share their numbering).
SELECT 1;
