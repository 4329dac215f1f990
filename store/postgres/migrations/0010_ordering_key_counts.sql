-- Retention prunes ordering keys: a key's row goes with its last task.
--
-- task_count is how many tasks rows carry the key, kept by triggers on
-- tasks (so every writer counts, whatever drover version it runs; keyless
-- rows skip them in their WHEN). TaskDeleteFinished deletes a key's row
-- once the count is 0, so the next task of the key starts again at
-- position 1. Only a key with no task at all may start again: a final
-- task keeps its position and can be resubmitted.
ALTER TABLE ordering_keys ADD COLUMN task_count bigint NOT NULL DEFAULT 0;

-- The function names its table with the schema the migration runs in
-- (the search_path at run time can be anything).
DO $migration$
BEGIN
  EXECUTE format($f$
    CREATE FUNCTION %1$I.ordering_key_count() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        UPDATE %1$I.ordering_keys SET task_count = task_count + 1 WHERE key = NEW.ordering_key;
      ELSE
        UPDATE %1$I.ordering_keys SET task_count = task_count - 1 WHERE key = OLD.ordering_key;
      END IF;
      RETURN NULL;
    END
    $body$$f$, current_schema());
END
$migration$;

CREATE TRIGGER tasks_ordering_key_added AFTER INSERT ON tasks
  FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL) EXECUTE FUNCTION ordering_key_count();
CREATE TRIGGER tasks_ordering_key_removed AFTER DELETE ON tasks
  FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL) EXECUTE FUNCTION ordering_key_count();

UPDATE ordering_keys AS k SET task_count = c.n
  FROM (SELECT ordering_key, count(*) AS n FROM tasks
        WHERE ordering_key IS NOT NULL GROUP BY ordering_key) AS c
  WHERE k.key = c.ordering_key;

-- Keys whose tasks retention already deleted.
DELETE FROM ordering_keys WHERE task_count = 0;
