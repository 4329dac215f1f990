-- Retention prunes ordering keys: a key's row goes with its last task.
--
-- task_count is how many tasks rows carry the key, kept by triggers on
-- tasks. TaskDeleteFinished deletes a key's row once the count is 0, so
-- the next task of the key starts again at position 1. Only a key with no
-- task at all may start again: a final task keeps its position and can be
-- resubmitted.
ALTER TABLE ordering_keys ADD COLUMN task_count INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER tasks_ordering_keys_added AFTER INSERT ON tasks
  FOR EACH ROW WHEN NEW.ordering_key IS NOT NULL
BEGIN
  UPDATE ordering_keys SET task_count = task_count + 1 WHERE key = NEW.ordering_key;
END;
CREATE TRIGGER tasks_ordering_keys_removed AFTER DELETE ON tasks
  FOR EACH ROW WHEN OLD.ordering_key IS NOT NULL
BEGIN
  UPDATE ordering_keys SET task_count = task_count - 1 WHERE key = OLD.ordering_key;
END;

UPDATE ordering_keys SET task_count = c.n
  FROM (SELECT ordering_key, count(*) AS n FROM tasks
        WHERE ordering_key IS NOT NULL GROUP BY ordering_key) AS c
  WHERE ordering_keys.key = c.ordering_key;

-- Keys whose tasks retention already deleted.
DELETE FROM ordering_keys WHERE task_count = 0;
