package store

import (
	"errors"

	"github.com/drover-run/drover/drovertype"
)

// NamespaceRange is the range [lo, hi) of stored names (task IDs, queue
// names) of the namespace ns, which is not the default one: the names
// starting "<ns>/". Drivers list a namespace's tasks and queues by it, on
// the primary key's order; the default namespace's are those without "/".
func NamespaceRange(ns string) (lo, hi string) {
	return ns + "/", ns + string(rune('/'+1))
}

// ListNamespace is a listing's Namespace as stored ("" for the default
// namespace) and whether the listing filters by namespace at all.
func ListNamespace(ns string) (stored string, filter bool) {
	if ns == "" {
		return "", false
	}
	return drovertype.StoredNamespace(ns), true
}

// errCountDefault refuses a count of the default namespace's tasks alone.
var errCountDefault = errors.New("the default namespace's tasks are not counted apart")

// CountNamespace is a count's Namespace as stored ("": every namespace),
// or an error for the default namespace: its tasks are not indexed apart,
// since that would cost every task of a store without namespaces an index
// entry, and counting them without an index would follow every
// namespace's unfinished tasks.
func CountNamespace(ns string) (string, error) {
	if ns == "" {
		return "", nil
	}
	if ns = drovertype.StoredNamespace(ns); ns == "" {
		return "", errCountDefault
	}
	return ns, nil
}
