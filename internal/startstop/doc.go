// Package startstop is the lifecycle every long-running part of drover
// has: a Service is started once with a context and stopped with Stop,
// which waits until it has stopped. A Group starts services in order and
// stops them in reverse, so what a service depends on outlives it. The
// model is River's rivershared/startstop.
package startstop
