-- The supervisor's extended wait (WaitPolicy): a step that reached its
-- failure threshold waits an extended period and is tried again, up to
-- wait_max times, before the failure policy applies. Copied at submit like
-- the rest of the policy; wait_max 0 turns it off, so existing tasks keep
-- what they had. Durations in microseconds; wait n lasts
-- wait_delay_us · wait_multiplier^(n-1), at most wait_max_delay_us.
--
-- Constant defaults (or none): adding the columns rewrites nothing.
ALTER TABLE tasks
    ADD COLUMN wait_max          integer          NOT NULL DEFAULT 0,
    ADD COLUMN wait_delay_us     bigint           NOT NULL DEFAULT 0,
    ADD COLUMN wait_multiplier   double precision NOT NULL DEFAULT 0,
    ADD COLUMN wait_max_delay_us bigint           NOT NULL DEFAULT 0;

-- A step's own policy, overriding its task's: on_failure '' and wait_max
-- NULL (with the other wait_ columns) take the task's. The check is NOT
-- VALID so that existing rows (all '') are not scanned under the lock.
ALTER TABLE steps
    ADD COLUMN on_failure        text NOT NULL DEFAULT '',
    ADD COLUMN wait_max          integer,
    ADD COLUMN wait_delay_us     bigint,
    ADD COLUMN wait_multiplier   double precision,
    ADD COLUMN wait_max_delay_us bigint,
    ADD CONSTRAINT steps_on_failure_check CHECK (on_failure IN ('','error','compensate')) NOT VALID;
