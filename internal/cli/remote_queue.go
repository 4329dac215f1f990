package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/drover-run/drover/convoy"
	"github.com/drover-run/drover/droverclient"
)

// printPublished prints the outcome of "queue publish".
func (e *env) printPublished(queue, messageID, session string, seq int64, duplicate bool) error {
	if e.jsonOut {
		return writeJSON(e.stdout, PublishedJSON{Queue: queue, Session: session, Seq: seq, Duplicate: duplicate, MessageID: messageID})
	}
	if duplicate {
		fmt.Fprintf(e.stdout, "duplicate: message ID %q was published within the dedupe window as message %d of session %s; nothing stored\n", messageID, seq, session)
		return nil
	}
	fmt.Fprintf(e.stdout, "published message %d to session %s of queue %s\n", seq, session, queue)
	return nil
}

// printResolved prints the outcome of "queue resolve" with the session
// after it.
func (e *env) printResolved(queue, session string, seq int64, action string, s *convoy.Session) error {
	now := time.Now()
	if e.jsonOut {
		return writeJSON(e.stdout, struct {
			Queue   string      `json:"queue"`
			Seq     int64       `json:"seq"`
			Action  string      `json:"action"`
			Session SessionJSON `json:"session"`
		}{queue, seq, action, sessionJSON(s, now)})
	}
	if action == "resubmitted" {
		fmt.Fprintf(e.stdout, "resubmitted message %d of session %s (queue %s): it is the head of the session again, delivered next; %d pending%s\n",
			seq, session, queue, s.Pending, sessionFlags(s, now))
	} else {
		fmt.Fprintf(e.stdout, "discarded message %d of session %s (queue %s); %d pending%s\n", seq, session, queue, s.Pending, sessionFlags(s, now))
	}
	return nil
}

// remotePublish publishes one message over the API. The API carries
// bodies as JSON, so the body must be a JSON document.
func (e *env) remotePublish(ctx context.Context, queue, session, messageID string, body []byte, eos bool, notBefore time.Time) error {
	if len(body) == 0 || !json.Valid(body) {
		return usagef("with --server the message body must be a JSON document (the API carries bodies as JSON), e.g. --body '{\"op\":\"create\"}' or --body '\"text\"'")
	}
	m := droverclient.PublishMessage{SessionID: session, Body: body, MessageID: messageID, EndOfSequence: eos}
	if !notBefore.IsZero() {
		m.NotBefore = &notBefore
	}
	res, err := e.remote.Publish(ctx, queue, m)
	if err != nil {
		return e.remoteErr(err)
	}
	if len(res) != 1 {
		return fmt.Errorf("server: publish answered %d results for one message", len(res))
	}
	return e.printPublished(queue, messageID, res[0].SessionID, res[0].Seq, res[0].Duplicate)
}

// remoteResolve resubmits or discards a dead letter over the API.
func (e *env) remoteResolve(ctx context.Context, queue, session string, seq int64, resubmit bool) error {
	action := "resubmitted"
	var err error
	if resubmit {
		err = e.remote.ResubmitDeadLetter(ctx, queue, session, seq)
	} else {
		action = "discarded"
		err = e.remote.DiscardDeadLetter(ctx, queue, session, seq)
	}
	if err != nil {
		return e.remoteErr(err)
	}
	s, err := e.findSession(ctx, queue, session)
	if err != nil {
		return err
	}
	return e.printResolved(queue, session, seq, action, s)
}
