-- Retention: the supervisor leader deletes final tasks older than a
-- configured age. This index finds them without scanning live work.
CREATE INDEX tasks_finished ON tasks (updated_at)
    WHERE process_state IN ('Processed','Error','Compensated','Cancelled');

-- Operators list tasks in Error often, and there are few: index them.
CREATE INDEX tasks_error ON tasks (id) WHERE process_state = 'Error';

-- Each scheduler counts the tasks it holds (its in-flight limit).
CREATE INDEX tasks_holder ON tasks (locked_by) WHERE locked_by IS NOT NULL;
