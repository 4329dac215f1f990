-- Cheaper task and step writes, which every dispatch and reply pays for.
--
-- tasks_holder duplicated tasks_held: both index exactly the held tasks
-- (locked_by IS NOT NULL), and every dispatch adds an entry to each. The
-- per-scheduler count and list of held tasks (TaskCountLockedBy,
-- TaskListLockedBy) now read tasks_held, whose entries are the held tasks
-- only: in-flight work, bounded by the schedulers' limits.
DROP INDEX IF EXISTS tasks_holder;

-- A step row is updated twice per attempt (dispatch, reply) and no indexed
-- column changes, so the updates can be HOT (no index entry, no VACUUM
-- needed for the old version) when the page has room. At fillfactor 90
-- only about one update in five found room. Affects pages written from now
-- on.
ALTER TABLE steps SET (fillfactor = 50);
