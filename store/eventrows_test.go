package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

func TestGroupEvents(t *testing.T) {
	ev := func(task string, alert bool) *dt.Event { return &dt.Event{TaskID: task, Alert: alert} }
	var long []*dt.Event
	for range store.EventRowSpan + 2 {
		long = append(long, ev("c", false))
	}
	cases := []struct {
		name string
		in   []*dt.Event
		want []int // events per row
	}{
		{"none", nil, nil},
		{"a run of one task", []*dt.Event{ev("a", false), ev("a", false), ev("a", false)}, []int{3}},
		{"tasks interleaved", []*dt.Event{ev("a", false), ev("b", false), ev("a", false)}, []int{1, 1, 1}},
		{"an alert alone", []*dt.Event{ev("a", false), ev("a", true), ev("a", false), ev("a", false)}, []int{1, 1, 2}},
		{"alerts in a row", []*dt.Event{ev("a", true), ev("a", true)}, []int{1, 1}},
		{"longer than a row", long, []int{store.EventRowSpan, 2}},
	}
	for _, c := range cases {
		var got []int
		n := 0
		for _, row := range store.GroupEvents(c.in) {
			got = append(got, len(row))
			for _, e := range row {
				if e != c.in[n] {
					t.Errorf("%s: event %d out of order", c.name, n)
				}
				n++
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: rows of %v, want %v", c.name, got, c.want)
		}
	}
}

func TestEventRowRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 123456000, time.UTC)
	row := []*dt.Event{
		{ID: 16, TaskID: "t", StepIndex: 0, Type: dt.EventStepProcessed, State: dt.Processing, Actor: "s", Attempt: 2, CreatedAt: at},
		{TaskID: "t", StepIndex: -1, Type: dt.EventProcessed, State: dt.Processed, Actor: "s", Term: 3, Message: "m", CreatedAt: at.Add(time.Microsecond)},
		{TaskID: "t", StepIndex: 1, Type: dt.EventStepStarted, CreatedAt: at.Add(time.Second)},
	}
	more, err := store.EncodeEventRow(row)
	if err != nil {
		t.Fatal(err)
	}
	if one, _ := store.EncodeEventRow(row[:1]); one != "" {
		t.Errorf("EncodeEventRow of one event = %q, want \"\"", one)
	}
	got, err := store.DecodeEventRow(row[0], more)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(row) {
		t.Fatalf("%d events decoded, want %d", len(got), len(row))
	}
	for i := range row {
		want := *row[i]
		want.ID = 16 + int64(i)
		if *got[i] != want {
			t.Errorf("event %d = %+v, want %+v", i, *got[i], want)
		}
	}
	for _, bad := range []string{"{", `[{"s":"x"}]`, "[" + strings.Repeat(`{"s":0,"t":"x","c":0},`, store.EventRowSpan-1) + `{"s":0,"t":"x","c":0}]`} {
		if _, err := store.DecodeEventRow(row[0], bad); err == nil || !strings.Contains(err.Error(), `row 16 (task "t")`) {
			t.Errorf("DecodeEventRow(%.20q…) error = %v, want one naming the row and task", bad, err)
		}
	}
}

func TestEventRowsAfter(t *testing.T) {
	rows := [][]*dt.Event{{{ID: 8}, {ID: 9}, {ID: 10}}, {{ID: 16}}, {{ID: 24}, {ID: 25}}}
	cases := []struct {
		after int64
		limit int
		want  string
	}{
		{0, 0, "[8 9 10 16 24 25]"},
		{9, 0, "[10 16 24 25]"},
		{9, 2, "[10 16]"},
		{10, 1, "[16]"},
		{25, 0, "[]"},
	}
	for _, c := range cases {
		var ids []int64
		for _, e := range store.EventRowsAfter(rows, c.after, c.limit) {
			ids = append(ids, e.ID)
		}
		if got := fmt.Sprint(ids); got != c.want && !(c.want == "[]" && ids == nil) {
			t.Errorf("EventRowsAfter(after %d, limit %d) = %v, want %s", c.after, c.limit, got, c.want)
		}
	}
	if got := store.EventRowsFloor(100); got != 100-store.EventRowSpan+1 {
		t.Errorf("EventRowsFloor(100) = %d", got)
	}
}
