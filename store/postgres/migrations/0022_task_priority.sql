-- Task priorities. claim_at is a task's place in the claim order: its
-- available_at moved earlier by a fixed step per level of priority
-- (drovertype.ClaimAt), written with available_at on every insert and
-- update. Schedulers claim by it, so higher priorities go first and a
-- lower one that has waited long enough goes before them. Final tasks are
-- never claimed, so only the others need it filled here (no rewrite of
-- the history of final tasks; priority's constant default rewrites
-- nothing either).
ALTER TABLE tasks ADD COLUMN priority smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 10);
ALTER TABLE tasks ADD COLUMN claim_at timestamptz;
UPDATE tasks SET claim_at = available_at WHERE process_state IN ('Pending','Processing','Compensating');
DROP INDEX tasks_claimable;
-- What schedulers claim: nobody holds it and it is Pending or waiting to be compensated.
CREATE INDEX tasks_claimable ON tasks (claim_at, id)
    WHERE locked_by IS NULL AND process_state IN ('Pending','Compensating');
