-- Retention prunes ordering keys: a key's row goes with its last task.
--
-- task_count is how many tasks rows carry the key, kept by triggers on
-- tasks (so every writer counts, whatever drover version it runs).
-- TaskDeleteFinished deletes a key's row once the count is 0, so the next
-- task of the key starts again at position 1. Only a key with no task at all may start again: a final
-- task keeps its position and can be resubmitted.
ALTER TABLE ordering_keys ADD COLUMN task_count bigint NOT NULL DEFAULT 0;

-- Statement-level triggers with transition tables: one UPDATE per
-- statement, grouped by key (a row trigger would update one key's row once
-- per task, which slows down quadratically in one transaction). The
-- functions name their table with the schema the migration runs in (the
-- search_path at run time can be anything).
DO $migration$
BEGIN
  EXECUTE format($f$
    CREATE FUNCTION %1$I.ordering_keys_added() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
      UPDATE %1$I.ordering_keys AS k SET task_count = k.task_count + a.n
        FROM (SELECT ordering_key, count(*) AS n FROM added
              WHERE ordering_key IS NOT NULL GROUP BY ordering_key) AS a
        WHERE k.key = a.ordering_key;
      RETURN NULL;
    END
    $body$$f$, current_schema());
  EXECUTE format($f$
    CREATE FUNCTION %1$I.ordering_keys_removed() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
      UPDATE %1$I.ordering_keys AS k SET task_count = k.task_count - r.n
        FROM (SELECT ordering_key, count(*) AS n FROM removed
              WHERE ordering_key IS NOT NULL GROUP BY ordering_key) AS r
        WHERE k.key = r.ordering_key;
      RETURN NULL;
    END
    $body$$f$, current_schema());
END
$migration$;

CREATE TRIGGER tasks_ordering_keys_added AFTER INSERT ON tasks
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION ordering_keys_added();
CREATE TRIGGER tasks_ordering_keys_removed AFTER DELETE ON tasks
  REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION ordering_keys_removed();

UPDATE ordering_keys AS k SET task_count = c.n
  FROM (SELECT ordering_key, count(*) AS n FROM tasks
        WHERE ordering_key IS NOT NULL GROUP BY ordering_key) AS c
  WHERE k.key = c.ordering_key;

-- Keys whose tasks retention already deleted.
DELETE FROM ordering_keys WHERE task_count = 0;
