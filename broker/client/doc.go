// Package client is the typed client of the broker's HTTP API (see broker and
// /openapi.json): sessions, their env, package requests (create, upload, get, long-poll
// wait), approve and deny, rebase, layers, gc and the audit log; and a session's warm
// sandbox (exec.go): Exec, ExecStream (the NDJSON events as they come), Shell, the
// workspace's files (PutFile and GetFile streamed, ListFiles, DeleteFile), Runs and
// Cancel. The bearer token goes in the Authorization header only, never in a URL; every
// call takes ctx first and is bounded by a timeout (a long poll by its wait plus that
// timeout, a run by its own plus a minute); an answer other than 2xx is an *Error carrying
// the API's "error" and "hint" and the HTTP status, which errors.Is matches against
// broker.ErrNotFound, ErrConflict, ErrInvalid, ErrUnavailable, ErrBusy and ErrTooLarge.
//
// pylayer run --broker, the end-to-end suites and bench/brokerload use it. It must never
// import a store, cmd/ or internal/cli, and never log or return a token.
package client
