package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/drover-run/drover/drovertype"
)

// Event rows. A driver stores the events of one task that one
// EventInsertMany call lists one after another in one row, up to
// EventRowSpan of them: a task's step_processed and processed, or a
// step_processed and the next step_started, are then one row, not two
// (each row of the events table costs its own heap tuple and an entry in
// every index on the table).
//
// The row's ID is its first event's ID, and its k-th event (from 0) has
// ID row ID + k. Row IDs are at least EventRowSpan apart, so the events'
// IDs stay distinct, and they keep the order in which the rows were
// written: a reader resumes after any event's ID, also one in the middle
// of a row. Rows written before the events were grouped hold one event
// each and may be 1 apart.
//
// The row's columns hold its first event as before; the others are in
// one column of their own (EncodeEventRow). An alert is always a row of
// its own, so a row's alert flag is its only event's and the alerts index
// finds every alert.

// EventRowSpan is the most events one event row holds, and the least
// distance between the IDs of two rows written in groups.
const EventRowSpan = 8

// GroupEvents splits events, in order, into the rows a driver stores:
// runs of events of one task, none of them an alert, at most
// EventRowSpan long.
func GroupEvents(events []*drovertype.Event) [][]*drovertype.Event {
	var rows [][]*drovertype.Event
	for i := 0; i < len(events); {
		j := i + 1
		if !events[i].Alert {
			for j < len(events) && j-i < EventRowSpan && !events[j].Alert && events[j].TaskID == events[i].TaskID {
				j++
			}
		}
		rows = append(rows, events[i:j:j])
		i = j
	}
	return rows
}

// eventRowEntry is one event after a row's first, as EncodeEventRow keeps
// it: the row gives the task, the ID and the alert flag (false).
type eventRowEntry struct {
	Step    int    `json:"s"`
	Type    string `json:"t"`
	State   string `json:"st,omitempty"`
	Actor   string `json:"a,omitempty"`
	Term    int64  `json:"tm,omitempty"`
	Attempt int    `json:"at,omitempty"`
	Message string `json:"m,omitempty"`
	At      int64  `json:"c"` // unix microseconds, the precision both drivers keep
}

// EncodeEventRow returns what a row of events stores beside its first
// event: the others, or "" when there are none (the column is NULL then).
func EncodeEventRow(row []*drovertype.Event) (string, error) {
	if len(row) < 2 {
		return "", nil
	}
	entries := make([]eventRowEntry, len(row)-1)
	for i, ev := range row[1:] {
		entries[i] = eventRowEntry{Step: ev.StepIndex, Type: string(ev.Type), State: string(ev.State), Actor: ev.Actor,
			Term: ev.Term, Attempt: ev.Attempt, Message: ev.Message, At: ev.CreatedAt.UnixMicro()}
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return "", fmt.Errorf("encode events of task %q: %w", row[0].TaskID, err)
	}
	return string(b), nil
}

// DecodeEventRow returns the events of a row: first, read from the row's
// columns with its ID, then those more holds (EncodeEventRow), with IDs
// first.ID+1, +2, ….
func DecodeEventRow(first *drovertype.Event, more string) ([]*drovertype.Event, error) {
	if more == "" {
		return []*drovertype.Event{first}, nil
	}
	var entries []eventRowEntry
	if err := json.Unmarshal([]byte(more), &entries); err != nil {
		return nil, fmt.Errorf("decode the events of row %d (task %q): %w", first.ID, first.TaskID, err)
	}
	if len(entries) >= EventRowSpan {
		return nil, fmt.Errorf("decode the events of row %d (task %q): %d events, at most %d fit", first.ID, first.TaskID, len(entries)+1, EventRowSpan)
	}
	out := make([]*drovertype.Event, 0, len(entries)+1)
	out = append(out, first)
	for i, en := range entries {
		out = append(out, &drovertype.Event{ID: first.ID + int64(i) + 1, TaskID: first.TaskID, StepIndex: en.Step,
			Type: drovertype.EventType(en.Type), State: drovertype.ProcessState(en.State), Actor: en.Actor, Term: en.Term,
			Attempt: en.Attempt, Message: en.Message, CreatedAt: time.UnixMicro(en.At).UTC()})
	}
	return out, nil
}

// EventRowsAfter turns the rows a driver read for an EventList after
// afterID into its events: every event of the rows with an ID above
// afterID, at most limit of them (0: all). The rows come in ID order, and
// were read from EventRowsFloor on, plus one row more than the
// limit (a row may hold nothing past afterID, and only one can).
func EventRowsAfter(rows [][]*drovertype.Event, afterID int64, limit int) []*drovertype.Event {
	var out []*drovertype.Event
	for _, row := range rows {
		for _, ev := range row {
			if ev.ID <= afterID {
				continue
			}
			if limit > 0 && len(out) == limit {
				return out
			}
			out = append(out, ev)
		}
	}
	return out
}

// EventRowsFloor is the lowest row ID that may hold an event with an ID
// above afterID: a driver reads the rows with an ID above it that either
// have an ID above afterID or hold more than one event.
func EventRowsFloor(afterID int64) int64 {
	return afterID - (EventRowSpan - 1)
}
