package store

import (
	"context"
	"time"
)

// ConsoleExecutor holds the primitives of the operator console's
// sign-outs: a session signed out before it expires stays refused, on
// every server of the store, until it would have expired.
type ConsoleExecutor interface {
	// SignOutInsert records that session SessionID was signed out; it
	// counts until ExpiresAt. Recording it again changes nothing. Write
	// transactions only.
	SignOutInsert(ctx context.Context, params *SignOutInsertParams) error
	// SignOutExists reports whether session SessionID was signed out and
	// that sign-out counts at Now (its ExpiresAt is after Now).
	SignOutExists(ctx context.Context, params *SignOutExistsParams) (bool, error)
	// SignOutDeleteExpired deletes up to Limit sign-outs whose ExpiresAt
	// is at or before Before and returns how many. Write transactions
	// only.
	SignOutDeleteExpired(ctx context.Context, params *SignOutDeleteExpiredParams) (int, error)
}

// SignOutInsertParams are the arguments of SignOutInsert.
type SignOutInsertParams struct {
	SessionID string
	ExpiresAt time.Time
}

// SignOutExistsParams are the arguments of SignOutExists.
type SignOutExistsParams struct {
	SessionID string
	Now       time.Time
}

// SignOutDeleteExpiredParams are the arguments of SignOutDeleteExpired.
type SignOutDeleteExpiredParams struct {
	Before time.Time
	Limit  int
}
