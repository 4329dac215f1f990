-- Event rows: the events of one task that one transaction records one
-- after another (a step's outcome and the next step's start, a last step's
-- outcome and the task's) are stored in one row, up to 8 of them, instead
-- of a row each. The row's columns hold its first event; more holds the
-- others (JSON, see store.EncodeEventRow), NULL for a row of one.
--
-- IDs: the row's ID is its first event's, and its k-th event's is the
-- row's + k. So that they stay distinct, row IDs are now taken 8 apart.
-- Rows already stored keep their IDs (one event each, 1 apart), and every
-- new ID is above them: a reader resuming after an ID it saw before the
-- upgrade resumes where it was. Nothing is rewritten.
--
-- type is renamed event_type so that a process of an earlier release that
-- still runs on this schema fails at once, every statement of it that
-- writes or reads the history (it would miss the events in more, and on
-- SQLite take IDs inside new rows), rather than go wrong quietly: stop
-- every older process before this upgrade. Its transactions roll back;
-- nothing is lost.
ALTER TABLE events ADD COLUMN more text;
ALTER TABLE events RENAME COLUMN type TO event_type;
ALTER SEQUENCE events_id_seq INCREMENT BY 8;

-- v_events still shows one line per event: a row's first, then those in
-- more, with their IDs.
CREATE OR REPLACE VIEW v_events AS
SELECT id, task_id, step_index, event_type AS type, state, alert, actor, term, attempt, message, created_at
FROM events
UNION ALL
SELECT e.id + m.ord, e.task_id, nullif((m.v ->> 's')::integer, -1), m.v ->> 't', m.v ->> 'st', false, m.v ->> 'a',
       coalesce((m.v ->> 'tm')::bigint, 0), coalesce((m.v ->> 'at')::integer, 0), m.v ->> 'm',
       to_timestamp((m.v ->> 'c')::bigint / 1e6)
FROM events AS e, json_array_elements(e.more::json) WITH ORDINALITY AS m(v, ord)
WHERE e.more IS NOT NULL;
