-- The unfinished tasks of namespaces other than the default one, by ID,
-- for the quota of tasks in flight per namespace: a namespace's count is a
-- range on the "<ns>/" prefix of this index (id is COLLATE "C", so the
-- range is the prefix), and follows that namespace's unfinished tasks
-- alone. The condition leaves out the default namespace's tasks (no "/" in
-- their ID), so a store without namespaces writes no entry for them; it
-- reads only columns other indexes read already, so updates that were HOT
-- stay HOT.
CREATE INDEX tasks_namespace_active ON tasks (id)
  WHERE strpos(id, '/') > 0 AND process_state IN ('Pending','Processing','Compensating');
