package webhook

import (
	"slices"
	"testing"
	"time"

	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/store"
)

// The dispatcher wakes for every retry it recorded, not only the earliest:
// a later one recorded while an earlier one is awaited is still awaited
// once the earlier one is claimed (it was left to the 30 s fallback).
func TestRetryTimes(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	retry := func(ms int) store.WebhookResult {
		return store.WebhookResult{Status: dt.WebhookPending, NextAttemptAt: at(ms)}
	}
	delivered := store.WebhookResult{Status: dt.WebhookDelivered}
	failed := store.WebhookResult{Status: dt.WebhookFailed}
	type round struct {
		results   []store.WebhookResult
		claimedAt time.Time
		want      time.Time // next wake
	}
	for _, tc := range []struct {
		name   string
		rounds []round
	}{
		{"nothing recorded", []round{{nil, at(0), time.Time{}}}},
		{"no retry among the results", []round{{[]store.WebhookResult{delivered, failed}, at(0), time.Time{}}}},
		{"a retry", []round{{[]store.WebhookResult{retry(4)}, at(0), at(4)}}},
		{"an earlier retry than the one awaited", []round{
			{[]store.WebhookResult{retry(10)}, at(0), at(10)},
			{[]store.WebhookResult{retry(4)}, at(1), at(4)},
			{nil, at(5), at(10)},
			{nil, at(11), time.Time{}},
		}},
		// The retry that was lost: the later one recorded while the
		// earlier one is awaited.
		{"a later retry than the one awaited", []round{
			{[]store.WebhookResult{retry(4)}, at(0), at(4)},
			{[]store.WebhookResult{retry(10)}, at(1), at(4)},
			{nil, at(5), at(10)},
			{nil, at(10), time.Time{}},
		}},
		{"the awaited one claimed, a later one recorded in the same round", []round{
			{[]store.WebhookResult{retry(4)}, at(0), at(4)},
			{[]store.WebhookResult{retry(9)}, at(5), at(9)},
		}},
		{"a retry due by the round's claim was claimed by it", []round{
			{[]store.WebhookResult{retry(3), retry(8)}, at(5), at(8)},
		}},
		{"a failed round covers nothing", []round{
			{[]store.WebhookResult{retry(4), retry(6)}, at(0), at(4)},
			{nil, time.Time{}, at(4)},
			{[]store.WebhookResult{retry(2)}, time.Time{}, at(2)},
			{nil, at(5), at(6)},
		}},
		{"the same time twice takes one place", []round{
			{[]store.WebhookResult{retry(4), retry(4), retry(6)}, time.Time{}, at(4)},
			{nil, at(4), at(6)},
		}},
	} {
		var r retryTimes
		for i, rd := range tc.rounds {
			r.recorded(rd.results, rd.claimedAt)
			if got := r.next(); !got.Equal(rd.want) {
				t.Errorf("%s, round %d: next wake %v, want %v", tc.name, i+1, got, rd.want)
			}
		}
	}
}

// Past maxRetryTimes the latest are forgotten, the earliest kept in order.
func TestRetryTimesCap(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var r retryTimes
	var results []store.WebhookResult
	for i := maxRetryTimes + 10; i > 0; i-- { // latest first
		results = append(results, store.WebhookResult{Status: dt.WebhookPending, NextAttemptAt: t0.Add(time.Duration(i) * time.Second)})
	}
	r.recorded(results, time.Time{})
	if len(r) != maxRetryTimes || !slices.IsSortedFunc(r, time.Time.Compare) {
		t.Fatalf("%d times kept (sorted: %v), want %d in order", len(r), slices.IsSortedFunc(r, time.Time.Compare), maxRetryTimes)
	}
	if first, last := r[0], r[len(r)-1]; !first.Equal(t0.Add(time.Second)) || !last.Equal(t0.Add(maxRetryTimes*time.Second)) {
		t.Errorf("kept %v .. %v, want the earliest %d", first, last, maxRetryTimes)
	}
	r.recorded(nil, t0.Add(maxRetryTimes*time.Second))
	if len(r) != 0 {
		t.Errorf("%d times left after a claim covering them all", len(r))
	}
}
