-- Server mode: the version of the workflow definition a task was submitted
-- with, the task's webhook callback URL, and the stored versions of
-- declarative workflow definitions.
--
-- workflow_version is 0 for workflows defined in code; callback_url is ''
-- when the task has none. Both are set at submit and never change.
ALTER TABLE tasks ADD COLUMN workflow_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN callback_url TEXT NOT NULL DEFAULT '';

DROP VIEW v_tasks;
CREATE VIEW v_tasks AS
SELECT id, workflow, process_state, locked_by,
       strftime('%Y-%m-%dT%H:%M:%fZ', complete_by / 1e6, 'unixepoch') AS complete_by,
       failure_count, current_step, step_count, ordering_key, last_error,
       strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1e6, 'unixepoch') AS created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', updated_at / 1e6, 'unixepoch') AS updated_at,
       workflow_version, callback_url
FROM tasks;

-- Every version of every declarative workflow definition ever loaded:
-- versions of a name count 1, 2, 3, … in the order they were first stored,
-- and the same source (digest) loaded again keeps its version. A task
-- names its definition by (workflow, workflow_version), so any process can
-- run it with the version it was submitted with.
CREATE TABLE workflow_definitions (
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL CHECK (version > 0),
    digest     TEXT    NOT NULL,
    source     BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (name, version),
    UNIQUE (name, digest)
) WITHOUT ROWID;
