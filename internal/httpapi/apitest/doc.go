// Package apitest starts a real API server (internal/httpapi) over a
// started drover client and a convoy client for the tests of the packages
// that talk to the API from outside, such as droverclient and the CLI's
// remote mode. httpapi's own tests cannot use it: importing it from
// package httpapi would be an import cycle.
package apitest
