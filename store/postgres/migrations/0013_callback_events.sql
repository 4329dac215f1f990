-- The events a task's callback URL receives (SubmitOptions.CallbackEvents):
-- comma-separated selectors, such as 'final,alerts'; '' (every task before
-- this migration) means final states only, as before. Set at submit and
-- never changed. A constant default: no table rewrite.
ALTER TABLE tasks ADD COLUMN callback_events text NOT NULL DEFAULT '';
