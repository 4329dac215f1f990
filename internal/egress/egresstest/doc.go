// Package egresstest helps test egress policies with real connections: a
// DNS server on loopback whose answers a test chooses (a resolver for
// egress.Options.Resolver), and HTTP listeners that count every connection
// reaching them, so a test can show that a refused call reached nothing.
package egresstest
