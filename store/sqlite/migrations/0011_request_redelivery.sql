-- Back-off for requests given back by a remote agent (a transient failure)
-- or by the server (the input could not be read yet). Redelivered at once,
-- a request that keeps failing fast would be claimed and given back in a
-- tight loop until its CompleteBy. Now it is claimable again only from
-- available_at (microseconds; NULL: at once), a delay that doubles with
-- each release counted in releases.
ALTER TABLE agent_requests ADD COLUMN available_at INTEGER;
ALTER TABLE agent_requests ADD COLUMN releases INTEGER NOT NULL DEFAULT 0;
