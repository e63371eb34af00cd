// Package cli is pylayer's command line: one file per command, each a constructor that
// declares its flags, calls the library function that does the work, and prints the
// result (stdout carries the result only, JSON with --json; logs and progress go to
// stderr). New returns the command tree; cmd/pylayer/main.go only runs it. It lives in
// internal/ so that it cannot become API, and its tests run every command in process.
//
// Nothing but cmd/pylayer may import it. It holds no logic of its own: locks come from
// layers/resolve, publishing from publish, pulls and trust from registry,
// what a sandbox runs on (pull-verify-hold, iso replacing base) from assemble, sessions from
// sandbox, the broker from broker and broker/builder.
//
// cmd/pylayer builds two binaries from it: the full one, with every command, and with
// -tags lean the front end, with only the commands front.go names; the front end hands
// any other command line to the full binary beside it (front.go says why).
package cli
