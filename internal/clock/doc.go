// Package clock is drover's one source of time: the Clock interface every
// layer reads the time through (drover.Clock and convoy.Clock are the same
// type; the engine, the HTTP API, the webhook dispatcher and the
// maintenance services take one), the system clock Real, and Fake, which
// moves only when a test says so.
package clock
