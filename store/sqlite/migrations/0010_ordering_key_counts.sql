-- Retention prunes ordering keys: a key's row goes with its last task.
--
-- task_count is how many tasks rows carry the key. TaskInsertMany adds
-- the tasks it inserts (the submit's OrderingSeqReserve made or locked the
-- row first), TaskDeleteFinished takes away the ones it deletes and deletes
-- the row when none are left, so the next task of the key starts again at
-- position 1. Only a key with no task at all may start again: a final task
-- that keeps its position can be resubmitted.
--
-- Processes of an older drover must not share the schema with this one:
-- their inserts would not count, and a key could go while it has tasks.
ALTER TABLE ordering_keys ADD COLUMN task_count INTEGER NOT NULL DEFAULT 0;

UPDATE ordering_keys SET task_count = c.n
  FROM (SELECT ordering_key, count(*) AS n FROM tasks
        WHERE ordering_key IS NOT NULL GROUP BY ordering_key) AS c
  WHERE ordering_keys.key = c.ordering_key;

-- Keys whose tasks retention already deleted.
DELETE FROM ordering_keys WHERE task_count = 0;
