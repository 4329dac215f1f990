package cli

import (
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/clicore"

	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
)

// The CLI checks what it is given by the rules of drovertype, the same as
// the library and the HTTP API, before it uses it: locally or with
// --server alike (JSON would turn invalid UTF-8 into U+FFFD on the way).

// checkTaskIDArg checks the ID of a task to look up or change (an ID
// starting with "-", from an older drover, is allowed: give it after "--").
func checkTaskIDArg(flag, id string) error { return checked(flag, "task ID", id, dt.NameProblem(id)) }

// checkNewTaskID checks --id of submit: a task ID that does not start with "-".
func checkNewTaskID(id string) error {
	if id == "" {
		return clicore.Usagef("--id is empty: give a task ID, or leave the flag out for a generated one")
	}
	return checked("--id", "task ID", id, dt.NewTaskIDProblem(id))
}

// checkOrderingKey checks --ordering-key.
func checkOrderingKey(k string) error {
	if k == "" {
		return clicore.Usagef("--ordering-key must not be empty")
	}
	return checked("--ordering-key", "ordering key", k, dt.KeyProblem(k, drover.MaxOrderingKeyBytes))
}

// checkReason checks the --reason of cancel.
func checkReason(reason string) error {
	return checked("--reason", "reason", reason, dt.TextProblem(reason, drover.MaxReasonBytes))
}

// checkQueueFlag checks a queue name given with flag.
func checkQueueFlag(flag, q string) error {
	if q == "" {
		return clicore.Usagef("%s is required: the queue name", flag)
	}
	return checked(flag, "queue name", q, dt.NameProblem(q))
}

// checkIDFlag checks a session or message ID given with flag.
func checkIDFlag(flag, what, s string, maxLen int) error {
	switch {
	case s == "" && flag == "--message-id":
		return clicore.Usagef("%s is empty: give a message ID, or leave the flag out", flag)
	case s == "":
		return clicore.Usagef("%s is required: the %s", flag, what)
	}
	return checked(flag, what, s, dt.KeyProblem(s, maxLen))
}

func checkSessionFlag(s string) error {
	return checkIDFlag("--session", "session ID", s, convoy.MaxSessionIDLen)
}

// checked is a usage error naming flag (if any) and the field when problem
// is not "".
func checked(flag, field, s, problem string) error {
	if problem == "" {
		return nil
	}
	fe := &dt.FieldError{Field: field, Value: s, Problem: problem}
	if flag == "" {
		return clicore.Usagef("%v", fe)
	}
	return clicore.Usagef("%s: %v", flag, fe)
}
