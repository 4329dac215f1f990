package drover

import (
	"errors"
	"fmt"
	"strings"

	"github.com/drover-run/drover/internal/flow"
	"github.com/drover-run/drover/store"
)

// Errors returned by the Client. Test for them with errors.Is.
var (
	ErrUnknownWorkflow  = errors.New("unknown workflow")
	ErrUnknownAgent     = errors.New("unknown agent")
	ErrInvalidWorkflow  = errors.New("invalid workflow")
	ErrInvalidInput     = errors.New("invalid input")
	ErrInputTooLarge    = errors.New("input too large")
	ErrInvalidTaskID    = errors.New("invalid task ID")
	ErrInvalidConfig    = errors.New("invalid config")
	ErrTaskNotFound     = store.ErrNotFound
	ErrTaskConflict     = flow.ErrTaskConflict
	ErrNotResubmittable = flow.ErrNotResubmittable
	ErrAlreadyFinal     = flow.ErrAlreadyFinal
	ErrNoSuchStep       = flow.ErrBadStep
	ErrStoreLocked      = store.ErrLocked
	ErrStoreCorrupt     = store.ErrCorrupt
	ErrNotMigrated      = store.ErrNotMigrated
	ErrSchemaTooNew     = store.ErrSchemaTooNew
	ErrNotStarted       = errors.New("client not started")
	ErrAlreadyStarted   = errors.New("client already started")
)

// ValidationError lists every problem found in a workflow definition.
type ValidationError struct {
	Workflow string
	Problems []string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("workflow %q: %s", e.Workflow, strings.Join(e.Problems, "; "))
}

// Unwrap makes errors.Is(err, ErrInvalidWorkflow) true.
func (e *ValidationError) Unwrap() error { return ErrInvalidWorkflow }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks an agent's error as non-transient: the agent stops retrying,
// the step fails at once and an operator alert is raised. Unmarked errors are
// transient and retried until the step's CompleteBy.
//
// A permanent error says the call did not take effect: the step is not
// compensated (a step that timed out is, since its call may have). Return
// one only when the remote service refused the call or it was never made.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
