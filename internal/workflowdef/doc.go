// Package workflowdef loads declarative workflows: one YAML (or JSON) file
// per workflow, each step calling a URL through the built-in HTTP agent or a
// remote agent by name, with input mapping from the task input and earlier
// step outputs (${...} expressions), time budgets, retry policies and
// compensation steps. docs/workflows.md is the format reference.
//
// Parse validates one file and reports every problem with file, line and
// field; Load does so for a directory. A Registry stores each file's bytes
// as a version of its workflow (sha256 digest; the store numbers versions),
// compiles it to a drover.Workflow, keeps every version it has seen so a
// task runs with the version it was submitted with, and provides the "http"
// agent and the input mapping of remote agents. Reload and Watch pick up
// changed files without touching tasks in flight.
package workflowdef
