package drovertype

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What drover accepts from outside. Every way in — the Go API, the CLI and
// the HTTP API — checks identifiers and free text with these functions
// before anything reaches a store, so the same input gets the same answer
// on every driver (PostgreSQL refuses a NUL character or invalid UTF-8 in
// text; SQLite would keep it, and then compare it byte for byte). Text that
// nobody can be asked to correct, such as an agent's error message, is made
// storable instead (Storable).

// Limits of identifiers, in bytes.
const (
	// MaxNameBytes caps names: task IDs and workflow, step, agent, queue
	// and instance names.
	MaxNameBytes = 200
	// MaxKeyBytes caps keys: ordering keys, session IDs and message IDs.
	MaxKeyBytes = 256
)

// FieldError is input refused at drover's boundary: an identifier or a
// text that is empty, too long, not valid UTF-8, or contains characters
// that cannot be stored or passed on. Its text names the field, quotes the
// value (shortened) and says what is wrong, e.g.
//
//	task ID "\xff\xfe": not valid UTF-8
//
// errors.Is(err, Err) holds, Err being the refusing package's sentinel
// (drover.ErrInvalidTaskID, convoy.ErrInvalidSession, ...).
type FieldError struct {
	Field   string // what was given: "task ID", "ordering key", "reason", ...
	Value   string
	Problem string // what is wrong with it
	Err     error  // the sentinel errors.Is matches; may be nil
}

func (e *FieldError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] // %q shows any bytes cut in a rune as escapes
		return fmt.Sprintf("%s %q…: %s", e.Field, v, e.Problem)
	}
	return fmt.Sprintf("%s %q: %s", e.Field, v, e.Problem)
}

// Unwrap returns the sentinel, for errors.Is.
func (e *FieldError) Unwrap() error { return e.Err }

// NameProblem says what is wrong with a name (a task ID; a workflow, step,
// agent, queue or instance name), or "" if nothing is: it must be 1 to
// MaxNameBytes bytes of valid UTF-8, printable, without spaces or "/" (the
// separator of idempotency keys and event subjects).
func NameProblem(s string) string {
	if p := lengthProblem(s, MaxNameBytes); p != "" {
		return p
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return fmt.Sprintf("contains the control character %U", r)
		case unicode.IsSpace(r):
			return fmt.Sprintf("contains a space (%U)", r)
		case r == '/':
			return `contains "/"`
		case !unicode.IsPrint(r):
			return fmt.Sprintf("contains the unprintable character %U", r)
		}
	}
	return ""
}

// NewTaskIDProblem is NameProblem for the ID of a task being submitted,
// which also must not start with "-": the CLI would read such an ID as a
// flag. Tasks stored before with such an ID can still be looked up.
func NewTaskIDProblem(s string) string {
	if p := NameProblem(s); p != "" {
		return p
	}
	if strings.HasPrefix(s, "-") {
		return `starts with "-" (the CLI would take it for a flag)`
	}
	return ""
}

// KeyProblem says what is wrong with a key (an ordering key, a session ID,
// a message ID), or "" if nothing is: it must be 1 to max bytes of valid
// UTF-8 without control characters. Spaces and "/" are allowed.
func KeyProblem(s string, max int) string {
	if p := lengthProblem(s, max); p != "" {
		return p
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Sprintf("contains the control character %U", r)
	}
	return ""
}

// TextProblem says what is wrong with a free text given by a caller who
// can be told (a cancel or dead-letter reason, a remote agent's error), or
// "" if nothing is: at most max bytes (max <= 0: no limit) of valid UTF-8
// without NUL characters. "" is fine; line breaks and tabs are too.
func TextProblem(s string, max int) string {
	switch {
	case max > 0 && len(s) > max:
		return fmt.Sprintf("is %d bytes, the limit is %d", len(s), max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains the NUL character (U+0000)"
	}
	return ""
}

func lengthProblem(s string, max int) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > max:
		return fmt.Sprintf("is %d bytes, the limit is %d", len(s), max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}

// CheckName returns a *FieldError wrapping err if NameProblem finds s wrong.
func CheckName(err error, field, s string) error { return check(err, field, s, NameProblem(s)) }

// CheckStoredName returns a *FieldError wrapping err if StoredNameProblem
// finds s wrong.
func CheckStoredName(err error, field, s string) error {
	return check(err, field, s, StoredNameProblem(s))
}

// CheckNewTaskID returns a *FieldError wrapping err if NewTaskIDProblem
// finds s wrong.
func CheckNewTaskID(err error, field, s string) error {
	return check(err, field, s, NewTaskIDProblem(s))
}

// CheckKey returns a *FieldError wrapping err if KeyProblem finds s wrong.
func CheckKey(err error, field, s string, max int) error {
	return check(err, field, s, KeyProblem(s, max))
}

// CheckText returns a *FieldError wrapping err if TextProblem finds s wrong.
func CheckText(err error, field, s string, max int) error {
	return check(err, field, s, TextProblem(s, max))
}

func check(err error, field, s, problem string) error {
	if problem == "" {
		return nil
	}
	return &FieldError{Field: field, Value: s, Problem: problem, Err: err}
}

// Storable returns s as it can be stored as text by every driver: s itself
// when it is valid UTF-8 without NUL characters (the common case, which
// costs no copy); otherwise each NUL and each byte that is not part of
// valid UTF-8 is replaced with U+FFFD, and a note saying so is appended.
// drover applies it to text nobody can be asked to correct: the errors of
// agents and handlers, and what remote services answered.
func Storable(s string) string {
	if TextProblem(s, 0) == "" {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 64)
	nul, bad := 0, 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			bad++
			b.WriteRune(utf8.RuneError)
		case r == 0:
			nul++
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	var what []string
	if nul > 0 {
		what = append(what, plural(nul, "NUL character"))
	}
	if bad > 0 {
		what = append(what, plural(bad, "byte")+" of invalid UTF-8")
	}
	fmt.Fprintf(&b, " [drover replaced %s with U+FFFD]", strings.Join(what, " and "))
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
