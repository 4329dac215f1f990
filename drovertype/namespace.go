package drovertype

import (
	"fmt"
	"strings"
)

// Namespaces separate tenants of one store: a task, a session queue and
// their events belong to one namespace, and what a namespace's callers see
// and act on is only their namespace's. A namespace's objects are stored
// under qualified names, "<namespace>/<name>" ("/" is never part of a task
// ID or a queue name); the default namespace's carry no prefix, so a store
// written before namespaces existed holds the default namespace's objects.
// A session's event subject in a namespace is "<namespace>/session:<queue>/<session>".

// DefaultNamespace names the namespace of everything stored without one.
const DefaultNamespace = "default"

// MaxNamespaceBytes caps a namespace's name.
const MaxNamespaceBytes = 64

// orderingKeySep separates a namespace from an ordering key: a control
// character, which KeyProblem refuses in a caller's key, so no key of the
// default namespace collides with a qualified one.
const orderingKeySep = "\x1f"

// NamespaceProblem says what is wrong with a namespace's name, or "" if
// nothing is: 1 to MaxNamespaceBytes ASCII letters, digits, "-" and "_".
func NamespaceProblem(ns string) string {
	if p := lengthProblem(ns, MaxNamespaceBytes); p != "" {
		return p
	}
	for _, c := range ns {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Sprintf("contains %q (a namespace holds only ASCII letters, digits, - and _)", c)
		}
	}
	return ""
}

// StoredNamespace is the namespace as the store records it: "" for the
// default namespace ("" or DefaultNamespace), else ns.
func StoredNamespace(ns string) string {
	if ns == DefaultNamespace {
		return ""
	}
	return ns
}

// QualifyName is the stored name of a namespace's task ID or queue name:
// "<ns>/<name>", or name itself in the default namespace.
func QualifyName(ns, name string) string {
	if ns = StoredNamespace(ns); ns == "" {
		return name
	}
	return ns + "/" + name
}

// NamespaceOf is the stored namespace of a stored task ID, queue name or
// event subject: the part before the first "/" unless that part holds ":"
// (a default namespace's session subject, "session:<queue>/…"); "" for the
// default namespace.
func NamespaceOf(stored string) string {
	i := strings.IndexByte(stored, '/')
	if i < 0 || strings.IndexByte(stored[:i], ':') >= 0 {
		return ""
	}
	return stored[:i]
}

// LocalName is a stored name (task ID, queue name, event subject) as the
// callers of its namespace know it: without the namespace prefix.
func LocalName(stored string) string {
	if ns := NamespaceOf(stored); ns != "" {
		return stored[len(ns)+1:]
	}
	return stored
}

// QualifyOrderingKey is the stored ordering key of a namespace's key, so
// that namespaces never wait on each other's keys.
func QualifyOrderingKey(ns, key string) string {
	if ns = StoredNamespace(ns); ns == "" || key == "" {
		return key
	}
	return ns + orderingKeySep + key
}

// LocalOrderingKey is a stored ordering key without its namespace.
func LocalOrderingKey(stored string) string {
	if i := strings.Index(stored, orderingKeySep); i >= 0 {
		return stored[i+1:]
	}
	return stored
}

// StoredNameProblem is NameProblem for a stored name that may be qualified
// by a namespace ("<ns>/<name>"): the namespace and the name each checked.
func StoredNameProblem(s string) string {
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return NameProblem(s)
	}
	if p := NamespaceProblem(s[:i]); p != "" {
		return "has the namespace " + fmt.Sprintf("%q", s[:i]) + " that " + p
	}
	return NameProblem(s[i+1:])
}

// CheckNamespace returns a *FieldError wrapping err if NamespaceProblem
// finds ns wrong; "" (the default namespace) is fine.
func CheckNamespace(err error, ns string) error {
	if ns == "" {
		return nil
	}
	return check(err, "namespace", ns, NamespaceProblem(ns))
}
