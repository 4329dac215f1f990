package fault

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/drover-run/drover/store"
)

var (
	armed   atomic.Int32
	mu      sync.Mutex
	markers = map[string]int{}
)

// RefuseText makes Text fail for every text containing marker, until the
// returned function is called. Tests running in parallel use markers of
// their own.
func RefuseText(marker string) (undo func()) {
	if marker == "" {
		panic("fault: empty marker")
	}
	mu.Lock()
	markers[marker]++
	mu.Unlock()
	armed.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			if markers[marker]--; markers[marker] == 0 {
				delete(markers, marker)
			}
			mu.Unlock()
			armed.Add(-1)
		})
	}
}

// Armed reports whether some test armed the point.
func Armed() bool { return armed.Load() > 0 }

// Text returns an error wrapping store.ErrBadData, as a driver's for a
// refused value, if one of texts contains an armed marker; else nil.
func Text(texts ...string) error {
	if !Armed() {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range texts {
		for m := range markers {
			if strings.Contains(s, m) {
				// Not quoting the text: an error recorded in its place
				// must not be refused again.
				return fmt.Errorf("%w: injected fault: a text of %d bytes was refused", store.ErrBadData, len(s))
			}
		}
	}
	return nil
}
