-- The events a task's callback URL receives (SubmitOptions.CallbackEvents):
-- comma-separated selectors, such as 'final,alerts'; '' (every task before
-- this migration) means final states only, as before. Set at submit and
-- never changed.
ALTER TABLE tasks ADD COLUMN callback_events TEXT NOT NULL DEFAULT '';
