-- The unfinished tasks of namespaces other than the default one, by ID,
-- for the quota of tasks in flight per namespace: a namespace's count is a
-- range on the "<ns>/" prefix of this index, so it follows that
-- namespace's unfinished tasks alone. The condition leaves out the default
-- namespace's tasks (no "/" in their ID), so a store without namespaces
-- writes no entry for them. process_state is in the key so the count reads
-- the index only (SQLite reads a row for a column that is only in the
-- condition).
CREATE INDEX tasks_namespace_active ON tasks (id, process_state)
  WHERE instr(id, '/') > 0 AND process_state IN ('Pending','Processing','Compensating');
