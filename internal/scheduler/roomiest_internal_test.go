package scheduler

import "testing"

func TestRoomiest(t *testing.T) {
	list := make([]*Scheduler, 3)
	for i, room := range []int64{5, 9, 9} {
		list[i] = &Scheduler{}
		list[i].room.Store(room)
	}
	for _, c := range []struct {
		start  int
		except *Scheduler
		want   int
	}{
		{0, nil, 1},     // most room
		{2, nil, 2},     // of equals, the first from start on
		{4, nil, 1},     // start wraps
		{0, list[1], 2}, // not the one asking
		{0, list[2], 1},
	} {
		if got := Roomiest(list, c.start, c.except); got != list[c.want] {
			t.Errorf("Roomiest(start %d) = %p, want list[%d]", c.start, got, c.want)
		}
	}
	if got := Roomiest(list[:1], 0, list[0]); got != nil {
		t.Errorf("Roomiest of only the asker = %p, want nil", got)
	}
}
