// Package broker is the request broker: the HTTP shim through which agents ask for
// packages, approvers approve or deny, and every decision lands in an append-only audit log.
// It defines the Store interface (implemented by broker/sqlite and broker/postgres, opened
// by --db value with broker/stores, checked by broker/storetest; every change commits with
// its audit event) and Server, an http.Handler with bearer-token auth (hashed at rest), long polling,
// a hand-written OpenAPI document and public Prometheus metrics at GET /metrics (metrics.go:
// the text format written by hand, for the start-up cost client_golang adds to every pylayer
// command, measured there; each Server's own, labelled by route pattern, never by raw path,
// with the Go runtime's and the process's basics under client_golang's names); and the
// approver web page (ui.go, files in broker/web): sign-in with a token into a server-side cookie session,
// CSRF-checked changes through the same JSON API, polling of a change counter. Warm
// sessions (executor.go, executor_http.go) are an Executor's: the broker checks the token
// against the session, the paths and sizes, maps ErrBusy to 409 (naming the run under way,
// which Executor.Runs lists first) and streams an exec's events as NDJSON; every exec and
// shell call that ran is audited (run.exec, run.shell: the code's sha256 and size, never
// the code or output) before its answer is sent; broker/executor runs them, reading each
// session through a SessionSource (the Store). NewExecHost (exechost.go) is the handler of
// a sandbox host serving a broker elsewhere (`pylayer serve --broker URL`): the executor
// routes alone, with no store, each call authorised by a SessionAuthority that asks the
// broker for the session's env with the caller's own token (broker/client's Authority),
// its yes kept per token hash and session for GrantTTL, the session's bindings taken from
// that answer (GrantedSessions); there nothing is audited, and the run's log line is its
// record.
//
// It is exposed to agents, so it bounds what any one client takes: HTTPServer and Serve
// set read, write (long polls extend theirs) and idle timeouts, a header limit and a cap
// on open connections (httpserver.go); an uploaded wheel is checked as a wheel before it
// is stored, once, counted against its session's quota and deleted when its request is
// refused, denied or collected (upload.go, uploadstore.go, uploadsweep.go); sign-ins are
// capped per subject and rate-limited (signin.go); text from the classifier and builder
// reaches no response with a host path in it (redact.go). GET /readyz checks that the
// store accepts a write.
//
// A client that long-polls its request anyway may ask with Prefer: respond-async
// (classifying.go): the request is stored classifying and answered 202 before it is
// resolved, then classified in the background, a failure to find out retried with
// backoff, and a request a dead replica left classifying taken up by another's sweep.
//
// Resolution and policy are not here: a Classifier (the catalog) classifies requests and a
// Builder (the worker) builds approved ones. It must never import cmd/, sandbox/ or a
// concrete store, and it must never log a token secret or an Authorization header.
package broker
