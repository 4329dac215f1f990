// Package postgres is drover's scale-out state-store driver: the store lives in
// one schema of a PostgreSQL database, and any number of drover processes on
// any number of hosts share it.
//
// # Connecting
//
// [Open] takes a connection URL (pgx syntax, pool settings such as
// pool_max_conns included) and makes its own pgxpool.Pool; [New] wraps a pool
// the application already has and leaves it open on Close. [Options].Schema
// (default "drover") names the schema holding every drover object, so drover
// can share a database with the application. [Driver.Migrate] creates it.
// Statement texts are fixed, so pgx's default statement cache prepares each
// once per connection; behind a transaction-pooling proxy that cannot keep
// prepared statements, add default_query_exec_mode=exec to the URL.
//
// # Schema handling
//
// The schema name is validated as [a-z_][a-z0-9_]* and every statement is
// generated once, at Open, with table names qualified by the quoted schema.
// Nothing depends on search_path: the driver's own pool and a caller's
// transaction passed to [Driver.InExternalTx] (a pgx.Tx, or a *sql.Tx of the
// pgx database/sql driver) hit the same tables, and the caller's session
// settings are never changed. Only migrations, inside their own transaction,
// use SET LOCAL search_path so the migration files need not name the schema.
//
// Migrations are the embedded migrations/*.sql files, recorded in the
// schema's drover_migrations table and applied in version order, each in its
// own transaction holding a per-schema pg_advisory_xact_lock, so processes
// that start together and all call Migrate take turns safely.
//
// # Locking
//
// Transactions run at READ COMMITTED (the Reader's TaskGetManyWithSteps
// runs in a read-only REPEATABLE READ one, for one snapshot). Inside [Driver.InTx] (and InExternalTx)
// the reads the engine bases a decision on — TaskGet, TaskGetMany,
// TaskGetManyWithSteps, TaskListExpired, StepListByTasks and LeaseGet —
// lock the rows they return
// with FOR UPDATE until the transaction ends, so the engine's
// read-check-write is safe against other processes (the store package's
// locking rule). Multi-row locking reads take their rows in primary-key
// order, the same order everywhere, so they do not deadlock one another.
//
// The queue-like primitives never wait for each other: TaskClaim,
// RequestClaim, RequestDeleteExpired and ReplyTake pick their rows with
// FOR UPDATE SKIP LOCKED in a MATERIALIZED CTE (so the locking subquery runs
// once and never locks more than its LIMIT), then update or delete exactly
// those rows. Competing schedulers and agents each get different rows. A
// claim with TaskClaimParams.WriteLater (the scheduler's) only locks its
// rows, SELECT … FOR UPDATE SKIP LOCKED with the LIMIT, and the caller
// writes them in the same transaction; TaskClaimWithSteps and
// TaskGetAndClaim also lock the steps of the tasks they claim, as
// StepListByTasks does. The steps of the held tasks TaskGetAndClaim reads
// for replies are read without locks: their tasks are locked by then, in an
// earlier statement, and every writer of steps locks the task first.
//
// A claim can hold a row it did not claim: under READ COMMITTED, when the
// row it reaches was changed by a transaction that committed meanwhile, it
// locks the newer version, re-checks it, skips it as no longer claimable,
// and keeps the lock until it commits. Such a row is usually a task another
// scheduler has just claimed. So TaskGetAndClaim, with which a scheduler
// reads the tasks it holds to apply their replies, skips the tasks another
// transaction holds locked (SKIP LOCKED) and reports them busy instead of
// waiting for that claim's whole transaction; the scheduler applies their
// replies in a later tick.
//
// LeaseCheck, the fence every scheduler transaction runs first, takes the
// lease's transaction-level advisory lock in shared mode and reads the row
// without locking it; LeaseAcquire and LeaseRelease take that advisory lock
// exclusive. So the schedulers of one process check their instance lease
// at the same time, while a takeover waits for all of them (and, being
// queued, is not starved by new checks, as it could be behind FOR SHARE
// row locks). The holder's own renewal (every TTL/3) is such a writer too:
// it waits for the open scheduler transactions, and new ones wait for it.
//
// Reads through [Driver.Reader] run on the pool and lock nothing; Reader
// refuses writes.
//
// # Ordering keys
//
// A task submitted with an ordering key gets a position within the key, and
// TaskClaim starts a Pending keyed task only when no task of its key with a
// smaller position is still Pending, Processing or Compensating (a probe of
// the tasks_ordering partial index per such candidate). For that to be
// safe, positions must follow commit order: if a task with position 2 could
// commit while the one with position 1 is still in flight, a claim in between
// would find nothing before 2 and start it first. A plain sequence has
// exactly that gap (numbers are taken at insert, rows become visible at
// commit).
//
// OrderingKeyReserve closes it with a row lock: it upserts the keys' rows of
// ordering_keys (INSERT … ON CONFLICT (key) DO UPDATE SET last_seq =
// last_seq + n RETURNING last_seq), which locks each row until the
// transaction ends. A second transaction reserving the same key waits on that
// lock (on the first's uncommitted insert, for a new key) until the first
// commits or rolls back, then reads the committed last_seq. So the later
// position always belongs to the later commit. Keys are locked in sorted
// (byte) order within one call, so two submissions of the same keys never
// deadlock on each other. The cost is that submissions of one key are
// serialized from the reservation to their commit; different keys do not
// wait for each other. The engine reserves first in a submission and writes
// events last. An application calling
// SubmitTx several times in one transaction locks keys in call order, and
// holds them until it commits.
//
// Retention (TaskDeleteFinished) deletes a key's row with the key's last
// task (ordering_keys.task_count, kept by statement-level triggers on
// tasks). Its pick locks each task's key with SKIP LOCKED and passes over
// the tasks of keys another transaction holds, so it never waits for a
// submit (which holds its keys until it commits and may itself wait for a
// task being deleted, an ID it submits again), and a busy key does not
// stall it. It prunes only the keys it holds.
//
// # Batches
//
// Batch primitives are one statement per call whatever the batch size: the
// rows travel as array parameters and come back out of unnest(...), as in
// INSERT … SELECT … FROM unnest($1::text[], …) and UPDATE … FROM
// unnest(…) AS u(…). Statement texts are fixed, so pgx prepares each once per
// connection. Inserts that return IDs (requests, replies, events) feed their
// rows in input order (WITH ORDINALITY … ORDER BY ord) and assign the
// returned IDs back in that order. The arrays are encoded by the driver's
// own binary encoders for the slice types it passes (RegisterArrayEncoders,
// installed on every connection of the pool Open makes; with pgx's exec or
// simple_protocol modes parameters go as text and they are not used), not
// by pgx's generic path, which boxes every element: the same bytes for a
// fifth less client CPU in a burn-down.
//
// # Round trips
//
// Inside a transaction, writes whose results the caller does not read
// before its next read (task, step and request updates, event inserts,
// notifications) are queued and sent as one pipeline (a pgx.Batch) with the
// next read or with the COMMIT; BEGIN goes out with the first statement. A
// scheduler tick is then a round trip per read plus one, instead of one per
// statement. Queued writes always run before any later read, and an error in
// one surfaces from that read or from the commit, which rolls the whole
// transaction back. On a caller's pgx.Tx (InExternalTx) the queue is sent
// before InExternalTx returns; on a *sql.Tx every statement runs at once.
//
// # Event order and gap-free tailing
//
// Subscribers tail the history with EventList(AfterID: last ID seen). With a
// plain bigserial that can skip events: IDs are taken at insert but become
// visible at commit, so a transaction holding ID 10 may commit after one
// holding ID 11 was read. The driver closes that gap on the reader's side,
// so that writers never wait for each other:
//
//   - Every event-writing transaction takes a transaction-level advisory
//     lock in shared mode, pg_advisory_xact_lock_shared(key of "events" and
//     the schema), before it takes its first event ID, and holds it until
//     it commits or rolls back.
//   - EventList first reads the sequence's last value L, then lists the
//     other transactions holding that lock (pg_locks). Any ID up to L was
//     taken by one of them or by a transaction already over. It waits
//     until those transactions have ended (polling pg_locks, with back-off),
//     and then returns events with IDs up to L only: every one of them is
//     final, committed or rolled back. A reader already past L does not wait.
//
// The cost falls on readers: two small extra statements, and a wait of
// about one commit when event writers are in flight. Of the readers outside
// a transaction, one per driver at a time lists the writers (reading
// pg_locks takes every partition of the server's lock table); those that
// find one doing so wait for it and use what it proved; one whose last ID
// that did not cover then proves up to the last ID handed out by then,
// unless that proof gave up on a writer that stays open. A lookup
// (EventListParams.Lookup) reads every committed event, without the bound.
// Writers pay a shared lock, and their commits share WAL flushes. Readers that have waited one
// second for a transaction that
// stays open, such as an application's transaction that called SubmitTx and
// has not committed, return only events up to the highest ID proven final
// before, and try again on their next call; the application's transaction
// delays the history, not other writers. A subscriber reading inside a
// REPEATABLE READ or SERIALIZABLE transaction of its own sees a snapshot
// older than the wait, and may skip events: tail in READ COMMITTED (drover's
// own transactions and the Reader do). A transaction that has itself written
// events does not wait (two such would wait for each other): its reads see
// its own events and what has committed, and are no gap-free tail. The
// webhook cursor, when it has to be made again, is placed only at an ID
// proven final.
//
// The engine still queues event inserts last in its pipelined transactions
// (with the COMMIT, after every read), which keeps readers' waits short. A
// read of the events table in the same transaction sends them first, so it
// sees them. The event sequence must keep CACHE 1: with per-session caches,
// an ID could be taken below the last value a reader saw, after it looked.
//
// The sequence numbers event rows, 8 apart (INCREMENT BY 8): a row holds a
// run of up to 8 events of one task, with IDs row ID + 0, 1, … (see
// store.GroupEvents). The proof above is about rows, and a row commits
// whole, so every event of a row up to the bound is final too. A reader
// resuming after an event in the middle of a row reads that row again
// (store.EventRowsFloor) and skips the events it has seen.
//
// Before this scheme the driver made event-writing transactions commit in
// ID order with the same lock taken exclusive, which serialized their
// commits: at most one per WAL flush in each schema. Processes of both
// kinds must not share a schema: an older reader would not wait.
//
// # Notifications
//
// NOTIFY takes a lock that serializes every notifying transaction of the
// server from its commit until that commit is durable. drover's own
// transactions therefore send their notifications just after their COMMIT,
// in the same round trip, in a transaction of their own committed without
// waiting for its WAL flush (synchronous_commit off for it alone): a
// notification is only a hint to wake up, and a lost one costs a poll
// interval. In a caller's transaction (InExternalTx) they are part of that
// transaction.
//
// # Plans
//
// drover's own transactions run with enable_seqscan and jit off and
// max_parallel_workers_per_gather 0 (set_config(…, true), the same as
// SET LOCAL). Every statement they run is built around an index, but
// without planner statistics (a new schema, a server with autovacuum off,
// or before autovacuum's first ANALYZE of a table) the planner guesses, and
// it guessed whole-table scans for lookups such as "the steps of these
// tasks", whose cost grows with every task ever run. With the setting off
// the planner uses an index whenever one applies. The same guesses, rows
// estimated by the ten thousand, brought JIT compilation and parallel
// workers to half-millisecond look-ups, 30–60 ms each. Transactions of the
// caller (InExternalTx) and reads through Reader keep the session's
// settings, except the Reader's count and list of one scheduler's held
// tasks, which run often, and its read of tasks with their steps, which
// must see one snapshot: each runs in a short transaction of its own.
//
// Vacuum is what no setting replaces: a claim reads tasks_claimable from
// its start, past the entries of every task claimed since the last VACUUM
// of the tasks table. A steady load reuses those index pages; a backlog
// leaves an entry per task until VACUUM removes them. Advise
// (store.Advisor) says when nothing will vacuum the table.
//
// # Optional capabilities and other specifics of the contract
//
// The executor implements the store's optional interfaces: TaskClaimWithSteps
// (one statement with WriteLater in a transaction), TaskGetAndClaim (the
// reads of a scheduler tick in one pipelined round trip, reporting tasks
// another transaction holds as busy instead of waiting) and Notify
// (NOTIFY, below). Writers overlap, so where the contract allows a choice
// this driver makes the one that does not wait:
//
//   - WebhookCursorLock skips a cursor another transaction holds (ok false),
//     and cannot make a missing cursor while an event writer stays open;
//     WebhookDeliveryClaim, like the other claims, uses SKIP LOCKED.
//   - Calls that change a session lock its row; SessionAccept leaves a held
//     session's ready time stale, so that settles and receives do not
//     rewrite indexed columns. A session closed by another transaction
//     after MessagePublishMany looked fails the call after it wrote other
//     sessions (roll back, as after any error).
//   - Claims with TaskClaimParams.After start past the index entries of
//     tasks claimed before, which stay until VACUUM.
//   - Transactions that lock the same rows in opposite orders (several
//     calls over different session sets, WorkflowDefPut of the same names
//     in different orders) can deadlock; the server aborts one, reported
//     as store.ErrConflict.
//
// # Time and errors
//
// State logic never reads the database clock: every "now" is a parameter.
// Times are timestamptz, stored to the microsecond (pgx truncates, like
// time.UnixMicro) and returned in UTC. Durations are bigint microseconds.
//
// Errors are translated at the boundary: a missing row is store.ErrNotFound,
// a missing schema or table store.ErrNotMigrated, a lock_timeout
// store.ErrLocked, and a transaction the server aborted because it
// conflicted with another one, a deadlock (SQLSTATE 40P01) or a
// serialization failure (40001), store.ErrConflict: nothing of it
// committed, and running it again is the remedy. A data exception
// (SQLSTATE class 22, such as a NUL character or invalid UTF-8 in text)
// or a value too large (54000) is store.ErrBadData. The statements an
// application runs through [TxOf] report conflicts the same way. Other
// errors (connection refused or closed, …) are returned wrapped with what
// the driver was doing. The pgx error is always kept in the chain for
// errors.As. InTx does not retry.
package postgres
