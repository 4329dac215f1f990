-- Session rows are updated on every settle, receive and renew while a
-- consumer holds the session. Those updates change no indexed column
-- (ready_at is brought up to date only on release: see queue_queries.go),
-- so they can be HOT: the new version goes in the same page, no index
-- entry is added, and dead versions are pruned within the page without
-- VACUUM. Leave more room in each page for those versions. Affects pages
-- written from now on.
ALTER TABLE queue_sessions SET (fillfactor = 70);
