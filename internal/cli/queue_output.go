package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/internal/clicore"
)

// printPublished prints the outcome of "queue publish".
func (e *env) printPublished(queue, messageID, session string, seq int64, duplicate bool) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, PublishedJSON{Queue: queue, Session: session, Seq: seq, Duplicate: duplicate, MessageID: messageID})
	}
	if duplicate {
		fmt.Fprintf(e.Stdout, "duplicate: message ID %q was published within the dedupe window as message %d of session %s; nothing stored\n", messageID, seq, session)
		return nil
	}
	fmt.Fprintf(e.Stdout, "published message %d to session %s of queue %s\n", seq, session, queue)
	return nil
}

// printResolved prints the outcome of "queue resolve" with the session
// after it.
func (e *env) printResolved(queue, session string, seq int64, action string, s *convoy.Session) error {
	now := time.Now()
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, struct {
			Queue   string      `json:"queue"`
			Seq     int64       `json:"seq"`
			Action  string      `json:"action"`
			Session SessionJSON `json:"session"`
		}{queue, seq, action, sessionJSON(s, now)})
	}
	if action == "resubmitted" {
		fmt.Fprintf(e.Stdout, "resubmitted message %d of session %s (queue %s): it is the head of the session again, delivered next; %d pending%s\n",
			seq, session, queue, s.Pending, sessionFlags(s, now))
	} else {
		fmt.Fprintf(e.Stdout, "discarded message %d of session %s (queue %s); %d pending%s\n", seq, session, queue, s.Pending, sessionFlags(s, now))
	}
	return nil
}

// printPolicy prints a queue's policy as "queue policy" does; created and
// changed tell the first line.
func (e *env) printPolicy(q *convoy.Queue, created, change bool) error {
	if e.JSON {
		return clicore.WriteJSON(e.Stdout, queueJSON(q))
	}
	switch {
	case created:
		fmt.Fprintf(e.Stdout, "created queue %s\n", q.Name)
	case change:
		fmt.Fprintf(e.Stdout, "updated the policy of queue %s\n", q.Name)
	}
	tw := newTable(e.Stdout)
	row(tw, "Queue:", q.Name)
	row(tw, "Max delivery count:", strconv.Itoa(q.MaxDeliveryCount))
	row(tw, "Poison policy:", string(q.PoisonPolicy))
	dw := q.DedupeWindow.String()
	if q.DedupeWindow == 0 {
		dw = "0s (off)"
	}
	row(tw, "Dedupe window:", dw)
	row(tw, "Lock duration:", q.LockDuration.String())
	row(tw, "Created:", fmtTime(&q.CreatedAt))
	row(tw, "Updated:", fmtTime(&q.UpdatedAt))
	return tw.Flush()
}
