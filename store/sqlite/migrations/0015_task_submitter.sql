-- Who submitted each task (Task.Submitter: the HTTP API's token actor
-- name; '' for in-process submits and every task before this migration),
-- for the quota of tasks in flight per token. Only tasks not yet final
-- with a submitter are indexed, so the count follows them and a store
-- without quotas pays only the column.
ALTER TABLE tasks ADD COLUMN submitter TEXT NOT NULL DEFAULT '';
CREATE INDEX tasks_submitter_active ON tasks (submitter)
  WHERE submitter <> '' AND process_state IN ('Pending','Processing','Compensating');
