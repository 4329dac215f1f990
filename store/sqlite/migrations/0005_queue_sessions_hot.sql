-- Migration 5 of the PostgreSQL store lowers the fillfactor of
-- queue_sessions for HOT updates. SQLite has no such setting: nothing to do
-- (the version is kept so both drivers share their numbering).
SELECT 1;
