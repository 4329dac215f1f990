-- The task list's filters by ordering key and by time range, which walked
-- the primary key and skipped what did not match (half a second for a key
-- with ten tasks among a million final ones).
--
-- tasks_ordering holds the unfinished tasks of a key only (the claim's
-- probe), so no index had the final ones. This one has every task of a
-- key in ID order: a page of a key, after an ID, is a range of it.
CREATE INDEX tasks_key ON tasks (ordering_key, id)
    WHERE ordering_key IS NOT NULL;

-- tasks_finished has the final tasks by update time; this is its
-- counterpart for the unfinished ones, so a time range reads both and no
-- more. It adds an index entry per write of an unfinished task (updated_at
-- changes with each).
CREATE INDEX tasks_active_updated ON tasks (updated_at)
    WHERE process_state IN ('Pending','Processing','Compensating');
