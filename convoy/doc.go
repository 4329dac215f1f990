// Package convoy implements session queues: the Sequential Convoy pattern,
// with the semantics of Azure Service Bus sessions, on drover's state store
// (SQLite or PostgreSQL). See docs/convoy-design.md.
//
// # Concepts
//
// A queue is a named stream of messages; each message belongs to a session
// (for example an order ID). Messages of one session are handed out strictly
// in publish order, one at a time: message n+1 is never delivered, not even
// prefetched, before n is settled. Different sessions are processed in
// parallel by competing consumers in any number of processes. Queues and
// sessions are created by their first publish; an idle session is a row in
// the store and nothing else.
//
// Every message gets a per-session sequence number, 1, 2, 3 … without gaps,
// in commit order. A message may carry a message ID (de-duplicated
// within the queue's dedupe window), an end-of-sequence flag (the session is
// closed for publishing; once the message is settled the session has ended)
// and a not-before time.
//
// # Consuming
//
// A consumer accepts a session and holds it under an exclusive lock: a lock
// duration, renewed in the background while the session is held, and a lock
// token that every settle names. A settle with a stale token (the lock
// expired, another consumer accepted the session since) fails with
// ErrLockLost and changes nothing. A message is settled by one of
//
//   - complete: it is removed; the next message becomes the head. The
//     session's state blob can change in the same transaction;
//   - abandon: it stays at the head and is delivered again, after an
//     optional delay, its delivery count growing;
//   - dead-letter: it moves to the dead-letter list with a reason.
//
// [SessionReceiver] (from [Client.AcceptSession] or
// [Client.AcceptNextSession]) is the Service Bus shape: one session, one
// message at a time. [Processor] is the fast consumer: one pump goroutine
// holds up to MaxSessions sessions and, in one store transaction per round,
// settles what handlers finished, receives the next heads, renews locks and
// accepts and releases sessions; handlers run concurrently, one per session.
// An idle session is released after IdleTimeout so others get their turn.
//
// # Poison messages
//
// A message received more often than the queue's MaxDeliveryCount (default
// 10) is dead-lettered instead of delivered, in the same transaction. What
// happens next is the queue's policy ([Client.SetQueuePolicy]):
//
//   - PoisonBlock (the default): the session halts, strict FIFO is kept, and
//     an operator alert (event type "session_blocked") is recorded under the
//     subject drovertype.SessionSubject(queue, session). Resubmitting the dead
//     letter ([Client.ResubmitDeadLetter]) puts it back at the head and
//     resumes the session in order; discarding it resumes with the next one;
//   - PoisonSkip: the session goes on; the dead letter is the recorded gap,
//     visible with [Client.DeadLetters], and a "message_dead_lettered" event
//     is recorded.
//
// # Transactions
//
// Messages can be published inside the application's own transaction
// ([Client.PublishTx]: they commit with its rows or not at all) or inside a
// store transaction already open ([Client.PublishWith]). A transactional
// handler ([NewProcessorTx], [HandlerTx]) writes through the store
// transaction that completes its message, so its effects and the completion
// commit together: a crash neither loses nor repeats them.
//
// # Ledgers
//
// [LedgerProcessor] consumes a queue of ledger messages, each holding many
// transactions for interleaved orders, and publishes each transaction to a
// target queue with session ID = its order ID, in ledger order, in the same
// transaction that completes the ledger message.
//
// # Getting started
//
//	c, _ := convoy.New(convoy.Config{Store: drv})
//	c.Publish(ctx, "orders", convoy.Message{SessionID: "o-17", Body: []byte(`{"op":"create"}`)})
//	p, _ := convoy.NewProcessor(c, "orders", func(ctx context.Context, m *convoy.ReceivedMessage) error {
//		return apply(m.SessionID, m.Seq, m.Body) // nil completes; an error abandons
//	}, convoy.ProcessorOptions{})
//	p.Start(ctx)
//	defer p.Stop(ctx)
//
// # Where FIFO limits scale
//
// A session is processed by one consumer at a time, one message at a time:
// a session's throughput is bounded by one handler's latency plus a store
// round trip, whatever the number of consumers. Throughput grows with the
// number of sessions processed at once. Producers of one session are
// serialized for the length of their transaction (the session's next
// sequence number is held until it commits).
package convoy
