// Package stdverify checks drover's webhooks with an implementation of the
// Standard Webhooks specification that is not drover's: the reference Go
// library, github.com/standard-webhooks/standard-webhooks/libraries/go.
//
// It is a module of its own, so that the library is a dependency of this
// test only and never of drover; scripts/test runs it after the main
// suite. Its module path lies under drover's, so its test uses drover's
// internal packages (through the replace directive of its go.mod) to run a
// real dispatcher.
package stdverify
