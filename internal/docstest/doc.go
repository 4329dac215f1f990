// Package docstest runs the shell command blocks of README.md, docs/*.md
// and examples/*/README.md as written, so that the documentation's
// commands keep working. The commands run from the repository's root.
//
// Its test (go test ./internal/docstest) copies the repository's files into
// a fresh directory for every document (a fresh clone, without build
// outputs), puts a freshly built drover on PATH, and runs every command of
// the document's ```sh, ```bash, ```shell and ```console blocks in order,
// in one bash session, each within a time limit. It fails on the first
// command that exits non-zero, naming the file, the block's and the
// command's lines, and showing the output.
//
// Conventions the documents follow:
//
//   - A block that needs something the test cannot provide (a PostgreSQL
//     server at a host of the example, TLS certificates, a second host) is
//     marked by an HTML comment on the line before its fence, with the
//     reason:
//
//     <!-- docs-test: skip, needs a PostgreSQL server at db:5432 -->
//
//     The test lists every skipped block with its reason (go test -v). A
//     marker anywhere else, or without a reason, fails the test.
//
//   - A command that runs in the background (ending with &) is left
//     running; when it names --listen HOST:PORT, the next command waits
//     until that address accepts connections. A background command that
//     exits with a failure fails the document. Everything still running is
//     stopped when the document ends.
//
//   - A command whose comment says "Ctrl-C" (such as an event stream with
//     --follow) runs until it is interrupted: once its standard output has
//     not grown for two seconds, the test sends it SIGINT, as a reader
//     would with Ctrl-C; it must then exit with status 0 or 130.
//
// Each document's session runs in a network namespace of its own when the
// machine allows one (unshare --net --map-root-user, and ip), so the
// documents run at the same time and their fixed ports collide with
// nothing; otherwise they run one after the other on this machine's ports.
// The environment is a new HOME and TMPDIR, this test's Go toolchain and
// caches, and no DROVER_* variables.
package docstest
