-- The task list's filters by ordering key and by time range, which walked
-- the primary key and skipped what did not match (half a second for a key
-- with ten tasks among a million final ones).
--
-- tasks_ordering holds the unfinished tasks of a key only (the claim's
-- probe), so no index had the final ones. This one has every task of a
-- key in ID order: a page of a key, after an ID, is a range of it.
CREATE INDEX tasks_key ON tasks (ordering_key, id)
    WHERE ordering_key IS NOT NULL;

-- A time range reads final tasks through tasks_finished. The unfinished
-- ones get no index by update time on purpose: every write of an
-- unfinished task would pay for it (measured: SQLite inserts 10-25% slower over three runs),
-- to speed up an operator's listing; there are few of them next to the
-- final ones.
