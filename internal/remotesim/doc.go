// Package remotesim is the flaky remote service behind drover's order demo.
//
// The Scheduler Agent Supervisor pattern assumes agents talk to remote services
// that fail transiently, fail permanently, or simply never answer. This package
// is such a service, served over real HTTP: it injects 503s, sticky 422s and
// hangs (some after the effect was already applied) from a seeded RNG, and it
// honours an Idempotency-Key header the way a payment API would.
//
// It counts how the callers behaved. DeduplicatedCalls shows retries that the
// idempotency key made harmless; DuplicateEffects counts the same logical
// operation applied twice under different keys, which is the bug the pattern
// exists to prevent and must stay 0 when agents reuse their keys.
package remotesim
