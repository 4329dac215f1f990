-- Server mode: the version of the workflow definition a task was submitted
-- with, the task's webhook callback URL, and the stored versions of
-- declarative workflow definitions.
--
-- workflow_version is 0 for workflows defined in code; callback_url is ''
-- when the task has none. Both are set at submit and never change. A
-- constant default makes these ADD COLUMNs metadata-only: no table rewrite.
ALTER TABLE tasks
    ADD COLUMN workflow_version integer NOT NULL DEFAULT 0,
    ADD COLUMN callback_url     text    NOT NULL DEFAULT '';

-- New columns go at the end, as CREATE OR REPLACE VIEW requires.
CREATE OR REPLACE VIEW v_tasks AS
SELECT id, workflow, process_state, locked_by, complete_by, failure_count, current_step, step_count,
       ordering_key, last_error, created_at, updated_at, workflow_version, callback_url
FROM tasks;

-- Every version of every declarative workflow definition ever loaded:
-- versions of a name count 1, 2, 3, … in the order they were first stored,
-- and the same source (digest) loaded again keeps its version. A task
-- names its definition by (workflow, workflow_version), so any process can
-- run it with the version it was submitted with. Both unique constraints
-- matter to concurrent loaders: see WorkflowDefPut.
CREATE TABLE workflow_definitions (
    name       text COLLATE "C" NOT NULL,
    version    integer     NOT NULL CHECK (version > 0),
    digest     text        NOT NULL,
    source     bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (name, version),
    UNIQUE (name, digest)
);
