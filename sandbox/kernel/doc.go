// Package kernel runs a persistent Python process, a kernel, in a session's
// sandbox (sandbox.Start) and runs cells in it, as a Jupyter kernel does: state
// persists across calls, the last expression's value is shown, timeouts
// interrupt the cell (KeyboardInterrupt) and keep the state, and a cell that
// ignores the interrupt is killed after a grace period.
//
// The kernel's Python side is driver.py, embedded and passed to the sandbox's
// interpreter as an argument of a one-line -c program that compiles it under
// the name its tracebacks leave out: nothing is written on the host or in the
// sandbox, no descriptor is added, and the process's stdin stays free for the
// protocol from the first byte (reading the source from stdin would need a
// framing and a round trip before the start). It speaks newline-delimited
// JSON with this package over the process's original stdin and stdout, which it
// keeps as private descriptors: the cell's fd 0 is /dev/null (input() and
// sys.stdin fail fast with a clear message), its fds 1 and 2 are pipes whose
// reader threads forward what they read as stream events of the current run, so
// the output of subprocesses and C code is captured too. A control thread reads
// requests: pings are answered at once, even while a cell runs; an interrupt is
// signal.pthread_kill(main thread, SIGINT), which also cuts time.sleep short.
//
// Rich outputs: display(obj) is a builtin that sends obj's richest MIME type
// (_repr_png_, _repr_html_, _repr_json_, _repr_mimebundle_ ...; dict and list as
// application/json), and matplotlib figures come back as image/png through an
// inline backend registered before any import (matplotlib itself is imported
// only if the cell does).
//
// The private descriptors are private from the cell's subprocesses, not from the
// cell: its code runs in the driver's process and can write to the protocol pipe.
// That is tolerated because a kernel serves one session: a forged line can only
// speak for the session's own run (events of another run id, pongs, a second ready
// are dropped), what it adds is held to the call's caps, a line past its cap kills
// the kernel, and a line that is not an event is ignored (FuzzDispatch).
//
// Calls are serialised by the caller; a concurrent call gets ErrBusy.
//
// Package kernel needs package sandbox only: it must never import registry, oci,
// broker, catalog or the CLI. It never prints and never logs.
package kernel
