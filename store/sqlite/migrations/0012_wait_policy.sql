-- The supervisor's extended wait (WaitPolicy): a step that reached its
-- failure threshold waits an extended period and is tried again, up to
-- wait_max times, before the failure policy applies. Copied at submit like
-- the rest of the policy; wait_max 0 turns it off, so existing tasks keep
-- what they had. Durations in microseconds; wait n lasts
-- wait_delay_us · wait_multiplier^(n-1), at most wait_max_delay_us.
ALTER TABLE tasks ADD COLUMN wait_max INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN wait_delay_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN wait_multiplier REAL NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN wait_max_delay_us INTEGER NOT NULL DEFAULT 0;

-- A step's own policy, overriding its task's: on_failure '' and wait_max
-- NULL (with the other wait_ columns) take the task's.
ALTER TABLE steps ADD COLUMN on_failure TEXT NOT NULL DEFAULT '' CHECK (on_failure IN ('','error','compensate'));
ALTER TABLE steps ADD COLUMN wait_max INTEGER;
ALTER TABLE steps ADD COLUMN wait_delay_us INTEGER;
ALTER TABLE steps ADD COLUMN wait_multiplier REAL;
ALTER TABLE steps ADD COLUMN wait_max_delay_us INTEGER;
