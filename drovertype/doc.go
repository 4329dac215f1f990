// Package drovertype holds the leaf domain types shared by drover's user API,
// its engine and its store drivers: tasks, steps, agent requests and replies,
// events and the ProcessState machine.
//
// It imports nothing from drover so that drivers can depend on it without a cycle.
// The root package re-exports these types; most users never import this package.
package drovertype
