package store

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/drover-run/drover/drovertype"
)

// ErrStale: the request exists but the caller's claim on it no longer
// holds — another agent claims it, nobody does, or its CompleteBy has
// passed. Nothing was changed.
var ErrStale = errors.New("request claim is stale")

// RemoteAgentExecutor holds the primitives that let agents in other
// processes, reached over the HTTP API, work on requests with a fencing
// token (see internal/httpapi's agent routes). The token names a request
// and the ClaimedBy value RequestClaim gave it; every primitive below
// acts only while that claim holds.
//
// A request row exists only while its attempt is current: every
// transition that supersedes a step's attempt (a reply applied, a
// supervisor recovery, a cancel) deletes the step's requests in the same
// transaction. (A current attempt can have no row: the scheduler's
// in-process fast path stores none.) So a row that is claimed by the caller and whose
// CompleteBy has not passed is proof enough that the attempt is current;
// the drivers also check the step's attempt, as a second fence.
type RemoteAgentExecutor interface {
	// RequestGet returns one request with its payload joined in as
	// RequestClaim joins it (Workflow, StepName, Input, PreviousOutput,
	// StepOutput), or ErrNotFound.
	RequestGet(ctx context.Context, params *RequestGetParams) (*drovertype.AgentRequest, error)
	// RequestAvailable reports whether Agent has an unclaimed request whose
	// CompleteBy is after Now: a cheap read (it takes no write lock) for
	// long-polls to call before RequestClaim.
	RequestAvailable(ctx context.Context, params *RequestAvailableParams) (bool, error)
	// RequestComplete deletes request ID if it is claimed by ClaimedBy,
	// Now is before its CompleteBy and its step's attempt is still the
	// request's, and returns it (without payload). Otherwise it changes
	// nothing and returns ErrStale, or ErrNotFound when no request has
	// that ID (never had, or already completed or deleted). Write
	// transactions only.
	RequestComplete(ctx context.Context, params *RequestCompleteParams) (*drovertype.AgentRequest, error)
	// RequestReleaseOne gives request ID back (unclaimed) so any agent can
	// claim it again once the delay of Redelivery has passed (counting
	// this release), if it is claimed by ClaimedBy and Now is before its
	// CompleteBy, and returns it (without payload). RequestClaim and
	// RequestAvailable pass it over until then; a delay that reaches past
	// CompleteBy leaves the step to the supervisor. Otherwise it changes
	// nothing and returns ErrStale, or ErrNotFound when no request has
	// that ID. Write transactions only.
	RequestReleaseOne(ctx context.Context, params *RequestReleaseOneParams) (*drovertype.AgentRequest, error)
}

// Redelivery is how long a request given back with RequestReleaseOne waits
// before it can be claimed again: First after its first release, doubling
// with each release after that, at most Max. The zero value: at once.
// Without it, an agent that fails fast would claim and give back the same
// request in a tight loop until its CompleteBy.
type Redelivery struct {
	First, Max time.Duration
}

// MaxRedelivery caps Redelivery.Max: a request waits at most a day
// between deliveries.
const MaxRedelivery = 24 * time.Hour

// Doublings is how many times First doubles until it reaches Max: the
// drivers stop doubling there, so the delay never overflows.
func (r Redelivery) Doublings() int {
	first, max := r.First.Microseconds(), r.Max.Microseconds()
	if first <= 0 || max <= first {
		return 0
	}
	return bits.Len64(uint64((max - 1) / first))
}

// Validate reports a negative First, a First below the store's resolution
// of 1µs (other than 0), a Max above MaxRedelivery, or a Max below First.
func (r Redelivery) Validate() error {
	switch {
	case r.First < 0:
		return fmt.Errorf("redelivery delay %s is negative", r.First)
	case r.First > 0 && r.First < time.Microsecond:
		return fmt.Errorf("redelivery delay %s is below 1µs, the store's resolution", r.First)
	case r.Max > MaxRedelivery:
		return fmt.Errorf("redelivery max delay %s is above %s", r.Max, MaxRedelivery)
	case r.Max < r.First:
		return fmt.Errorf("redelivery max delay %s is below the first delay %s", r.Max, r.First)
	}
	return nil
}

// RequestAvailableParams are the arguments of RequestAvailable.
type RequestAvailableParams struct {
	Agent string
	Now   time.Time
}

// RequestCompleteParams are the arguments of RequestComplete.
type RequestCompleteParams struct {
	ID        int64
	ClaimedBy string
	Now       time.Time
}

// RequestGetParams are the arguments of RequestGet.
type RequestGetParams struct {
	ID int64
}

// RequestReleaseOneParams are the arguments of RequestReleaseOne.
type RequestReleaseOneParams struct {
	ID         int64
	ClaimedBy  string
	Now        time.Time
	Redelivery Redelivery
}
