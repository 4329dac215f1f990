-- Migration 9 of the PostgreSQL store drops a duplicate index of held tasks
-- and lowers the fillfactor of steps. The SQLite store has neither the
-- duplicate (it keeps its holder index, which its planner relies on) nor
-- fillfactor: nothing to do (the version is kept so both drivers share
-- their numbering).
SELECT 1;
