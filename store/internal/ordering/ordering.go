// Package ordering holds the drivers' shared bookkeeping of ordering-key
// positions (store.Executor.OrderingKeyReserve).
package ordering

import (
	"fmt"
	"slices"
)

// Count returns the distinct keys in byte order (the order drivers lock
// keys in, and the "C" collation's) and how often each occurs.
func Count(keys []string) ([]string, map[string]int64) {
	counts := make(map[string]int64, len(keys))
	for _, k := range keys {
		counts[k]++
	}
	distinct := make([]string, 0, len(counts))
	for k := range counts {
		distinct = append(distinct, k)
	}
	slices.Sort(distinct)
	return distinct, counts
}

// Assign hands each entry of keys its position: a key's counts[key]
// reserved positions end at last[key] and go to its entries in order.
func Assign(keys []string, counts, last map[string]int64) ([]int64, error) {
	next := make(map[string]int64, len(counts))
	for k, n := range counts {
		l, ok := last[k]
		if !ok {
			return nil, fmt.Errorf("no position returned for key %q", k)
		}
		next[k] = l - n + 1
	}
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = next[k]
		next[k]++
	}
	return out, nil
}
