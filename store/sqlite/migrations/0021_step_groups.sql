-- Parallel steps: the branches of a group are step rows with the group's
-- name in step_group ('' for a step of its own). finish_seq numbers the
-- steps of a task in the order they completed (0: not completed), so that
-- compensation undoes them in reverse order of completion even when two
-- branches finished at the same instant.
ALTER TABLE steps ADD COLUMN step_group TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN finish_seq INTEGER NOT NULL DEFAULT 0;

-- A request whose previous output is not the output of the step just before
-- it (a branch after the first of its group, a step after a group) carries
-- it: previous_own set, previous_output the value (NULL: none).
ALTER TABLE agent_requests ADD COLUMN previous_own INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agent_requests ADD COLUMN previous_output BLOB;
