-- Event rows: the events of one task that one transaction records one
-- after another (a step's outcome and the next step's start, a last step's
-- outcome and the task's) are stored in one row, up to 8 of them, instead
-- of a row each. The row's columns hold its first event; more holds the
-- others (JSON, see store.EncodeEventRow), NULL for a row of one.
--
-- IDs: the row's ID is its first event's, and its k-th event's is the
-- row's + k. So that they stay distinct, the driver gives new rows IDs 8
-- apart, above the highest ever handed out (sqlite_sequence). Rows already
-- stored keep their IDs (one event each, 1 apart): a reader resuming after
-- an ID it saw before the upgrade resumes where it was.
--
-- type is renamed event_type so that a process of an earlier release that
-- still runs on this file fails at once, every statement of it that writes
-- or reads the history (it would miss the events in more, and take IDs
-- inside new rows), rather than go wrong quietly: stop every older process
-- before this upgrade. Its transactions roll back; nothing is lost.
DROP VIEW v_events;
ALTER TABLE events ADD COLUMN more TEXT;
ALTER TABLE events RENAME COLUMN type TO event_type;

-- v_events still shows one line per event: a row's first, then those in
-- more, with their IDs.
CREATE VIEW v_events AS
SELECT id, task_id, step_index, event_type AS type, state, alert, actor, term, attempt, message,
       strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1e6, 'unixepoch') AS created_at
FROM events
UNION ALL
SELECT e.id + m.key + 1, e.task_id, nullif(m.value ->> 's', -1), m.value ->> 't', m.value ->> 'st', 0, m.value ->> 'a',
       coalesce(m.value ->> 'tm', 0), coalesce(m.value ->> 'at', 0), m.value ->> 'm',
       strftime('%Y-%m-%dT%H:%M:%fZ', (m.value ->> 'c') / 1e6, 'unixepoch')
FROM events AS e, json_each(e.more) AS m
WHERE e.more IS NOT NULL;
