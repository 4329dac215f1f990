package scheduler

import "testing"

func TestPick(t *testing.T) {
	mk := func(rooms ...int64) []*Scheduler {
		list := make([]*Scheduler, len(rooms))
		for i, r := range rooms {
			list[i] = &Scheduler{ClaimBatch: 4}
			list[i].room.Store(r)
		}
		return list
	}
	for _, c := range []struct {
		rooms  []int64
		except int // index, or -1
		want   int // index, or -1 for nil
	}{
		{[]int64{4, 9}, -1, 0},    // the first with room for a batch
		{[]int64{3, 9, 9}, -1, 1}, // the first lacks it: the next that has it
		{[]int64{4, 9}, 0, 1},     // not the one asking
		{[]int64{1, 3, 2}, -1, 1}, // none has: the most room
		{[]int64{1, 2, 2}, -1, 1}, // of equals, the first
		{[]int64{3, 1}, 0, 1},
		{[]int64{9}, 0, -1}, // only the asker
	} {
		list := mk(c.rooms...)
		var except *Scheduler
		if c.except >= 0 {
			except = list[c.except]
		}
		got := Pick(list, except)
		switch {
		case c.want < 0 && got != nil:
			t.Errorf("Pick(%v, except %d) = %p, want nil", c.rooms, c.except, got)
		case c.want >= 0 && got != list[c.want]:
			t.Errorf("Pick(%v, except %d) = %p, want list[%d]", c.rooms, c.except, got, c.want)
		}
	}
}
