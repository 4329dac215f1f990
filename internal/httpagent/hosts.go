package httpagent

import (
	"container/list"
	"sync"
)

// hostTable holds the state of each host a Caller calls (its breaker and
// call slots), at most max of them: hosts come from tasks' data (a URL
// taken from the input), so the table must not grow with every name a task
// can make up. Past max, the least recently used host that no call holds
// is dropped; a host in use is never dropped, so its slots keep limiting
// its calls. A dropped host starts afresh (breaker closed) when called
// again.
//
// The table is keyed by a string (hostKey today): a fairness key such as
// a namespace and host would only change how keys are made.
type hostTable struct {
	max  int
	make func(key string) *host

	mu    sync.Mutex
	byKey map[string]*list.Element // of *host
	order list.List                // most recently used first
}

func newHostTable(max int, make func(key string) *host) *hostTable {
	return &hostTable{max: max, make: make, byKey: map[string]*list.Element{}}
}

// acquire returns the host of key, created on first use, and holds it
// until release.
func (t *hostTable) acquire(key string) *host {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byKey[key]; ok {
		t.order.MoveToFront(e)
		h := e.Value.(*host)
		h.refs++
		return h
	}
	h := t.make(key)
	h.refs = 1
	t.byKey[key] = t.order.PushFront(h)
	for e := t.order.Back(); len(t.byKey) > t.max && e != nil; {
		prev := e.Prev()
		if old := e.Value.(*host); old.refs == 0 {
			t.order.Remove(e)
			delete(t.byKey, old.key)
		}
		e = prev
	}
	return h
}

// release ends a hold of acquire.
func (t *hostTable) release(h *host) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h.refs--
}

// get returns the host of key without holding it, nil when not there.
func (t *hostTable) get(key string) *host {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byKey[key]; ok {
		return e.Value.(*host)
	}
	return nil
}

// len is the number of hosts held.
func (t *hostTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKey)
}

// each calls f for every host held, under the table's lock.
func (t *hostTable) each(f func(*host)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.byKey {
		f(e.Value.(*host))
	}
}
