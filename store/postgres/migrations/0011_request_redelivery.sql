-- Back-off for requests given back by a remote agent (a transient failure)
-- or by the server (the input could not be read yet). Redelivered at once,
-- a request that keeps failing fast would be claimed and given back in a
-- tight loop until its CompleteBy. Now it is claimable again only from
-- available_at (NULL: at once), a delay that doubles with each release
-- counted in releases.
--
-- Both columns have constant defaults: adding them rewrites nothing.
ALTER TABLE agent_requests
    ADD COLUMN available_at timestamptz,
    ADD COLUMN releases     integer NOT NULL DEFAULT 0;
