// Package executor is the per-host manager of warm session processes: Manager
// implements broker.Executor for `pylayer serve`, running one persistent Python
// process (a sandbox/kernel Kernel) per session, in the session's sandbox.
//
// A session's process starts on its first call, on what the session is bound to
// (assemble.Session.Refs, then assemble.Assemble, as `pylayer run --session` has
// it), with the session's persistent workspace <Root>/<session id> mounted at
// /workspace and its cache <Root>/.cache/<session id>, under the limits and host
// user of `pylayer run`. Every call reads the session and its bindings once, from
// Options.Sessions (the broker's Store, or broker.GrantedSessions on a sandbox host of a
// remote broker: what the broker answered the call's token), and compares them, by
// digest, with what the process runs on: changed, the process is restarted on the new
// layers and the call says why. Runs lists the call under way first (broker.RunRunning),
// so that a call refused meanwhile can name it, and Cancel ends exec and shell calls alike.
//
// # Lifecycle
//
//   - Calls of one session run one at a time: a second one while another runs is
//     refused at once (broker.ErrBusy), never queued. Cancel interrupts a call.
//   - A process idle for IdleTimeout is stopped; one that has exited, or does not
//     answer a health check (every HealthEvery while idle), is dropped. The next
//     call starts another and says the state was lost (Restarted, RestartReason).
//   - The record of a session with no process (its last 50 runs, why its process
//     went away) is dropped ForgetAfter (a day) after its last call: the host keeps
//     no per-session memory of sessions long unused.
//   - At most MaxLive processes run on the host: starting another stops the one
//     idle longest; with every one busy the call is broker.ErrUnavailable.
//   - A cell that ignores its timeout's interrupt is killed by the kernel: the
//     process is restarted within the call, which says so. A crash restarts it
//     once; a crash in the next call too (two in a row, with no call between that
//     ended with the process alive) leaves the session without a process, every
//     call an error, until a call with reset, which always restarts first.
//
// # Files
//
// PutFile, OpenFile, ListFiles and DeleteFile work in the workspace through an
// os.Root, so no path, and no symbolic link the session made, leads out of it;
// ".." is refused outright. A put is written to a temporary name beside its
// target and renamed into place, capped at MaxFile (broker.ErrTooLarge, nothing
// left behind); a symbolic link at the target is replaced, never followed, and a
// directory there is refused. OpenFile reads regular files only (a FIFO or device is
// refused, not opened). A listing holds at most 10,000 entries: a bigger directory is
// broker.ErrTooLarge, never an arbitrary part of it. What the file system refuses of a
// name (longer than 255 bytes, a file where a directory must be) is broker.ErrInvalid.
// When the manager runs as root, what it creates is handed to the sandbox host user
// (sandbox.HostIdentity), as the workspace is.
//
// It logs through Options.Logger, never a call's code or output. It may import
// only broker, assemble, sandbox and sandbox/kernel of the module (internal/depcheck).
package executor
