package scheduler

import "testing"

func TestPick(t *testing.T) {
	mk := func(rooms ...int64) []*Scheduler {
		list := make([]*Scheduler, len(rooms))
		for i, r := range rooms {
			list[i] = &Scheduler{ClaimBatch: 4}
			list[i].room = int(r)
		}
		return list
	}
	for _, c := range []struct {
		rooms   []int64
		failing []int // indexes of schedulers backing off after a failed tick
		except  int   // index, or -1
		want    int   // index, or -1 for nil
	}{
		{[]int64{4, 9}, nil, -1, 0},         // the first with room for a batch
		{[]int64{3, 9, 9}, nil, -1, 1},      // the first lacks it: the next that has it
		{[]int64{4, 9}, nil, 0, 1},          // not the one asking
		{[]int64{9, 9, 9}, nil, 1, 2},       // after the one asking: a backlog goes round
		{[]int64{9, 9, 9}, nil, 2, 0},       // and wraps
		{[]int64{1, 3, 2}, nil, -1, 1},      // none has room for a batch: the most room
		{[]int64{1, 2, 2}, nil, -1, 1},      // of equals, the first
		{[]int64{9, 9}, []int{0}, -1, 1},    // not one that is failing
		{[]int64{9, 1}, []int{0}, -1, 1},    // even with less room
		{[]int64{9, 5}, []int{0, 1}, -1, 0}, // unless all are
		{[]int64{2, 5}, []int{0, 1}, -1, 1}, // then the most room
		{[]int64{9}, nil, 0, -1},            // only the asker
	} {
		list := mk(c.rooms...)
		for _, i := range c.failing {
			list[i].failing.Store(true)
		}
		var except *Scheduler
		if c.except >= 0 {
			except = list[c.except]
		}
		got := Pick(list, except)
		switch {
		case c.want < 0 && got != nil:
			t.Errorf("Pick(%v, failing %v, except %d) = %p, want nil", c.rooms, c.failing, c.except, got)
		case c.want >= 0 && got != list[c.want]:
			t.Errorf("Pick(%v, failing %v, except %d) = %p, want list[%d]", c.rooms, c.failing, c.except, got, c.want)
		}
	}
}
