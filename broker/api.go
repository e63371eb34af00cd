package broker

import (
	"context"
	"time"

	"github.com/pylayer/pylayer/layers/lock"
)

// Builder is the worker that builds approved requests. Enqueue must not block for long;
// the worker claims work with Store.ClaimBuild (a lease), moves the request through built/bound
// or failed, and calls Server.Notify(requestID) after each change so long polls wake.
type Builder interface {
	Enqueue(ctx context.Context, requestID string)
}

// Ended is a Builder told each time the store's change feed reports that a request
// may have ended (bound, failed; or, after the feed reconnected, anything), by any
// replica: a worker waiting for another replica's lease on a layer, which that replica
// releases just before it binds, tries again then rather than at its next poll.
type Ended interface {
	RequestEnded()
}

// Binder is a Builder that can tell, from memory, that an approved request needs no build:
// its classification's layer is published and known to fit the session. BindNow then
// returns the binding and its audit event, and the server stores the request bound (with
// Store.CreateBound) instead of queueing it; false means queue it as usual. It must not
// do I/O: it runs on the request's hot path.
type Binder interface {
	BindNow(s Session, r Request) (Binding, AuditEvent, bool)
}

// Deferred is a Classifier whose classifications take a while (they resolve against an
// index) and that can tell, without I/O, when it knows one already. A client that
// prefers an asynchronous answer (Prefer: respond-async) gets one from a server whose
// classifier is Deferred: the request is stored classifying, answered 202 at once, and
// classified in the background (Store.Classified); unless Known, when it is classified
// at once as for any other client. Uploads are always classified at once.
type Deferred interface {
	Known(s Session, specs []string) bool
}

// Upload is a wheel an agent uploaded, checked as a wheel and stored once under the data
// dir. Path is for the classifier's eyes only: it must never reach a response.
type Upload struct {
	Filename string // validated with wheel.ParseFilename
	Path     string // where the bytes are, <data>/uploads/<session>/<sha256>/<filename>
	SHA256   string // hex
	Size     int64

	session string // the session that holds it (set by the server)
}

// Classifier resolves a request against the session's base lock and classifies it. It
// returns the request with State (approved, pending or rejected), Decision, Reasons,
// Isolated (an isolated layer may be offered to the approver) and Packages filled; the
// server sets ID, SessionID, Specs, Upload and the times. upload is nil for specs.
// An error means the classifier itself failed (not that the request is refused): one
// wrapping ErrUnavailable (the index timed out or answered 5xx, the caller went away)
// may pass, so the server answers 503 with Retry-After and stores nothing.
type Classifier interface {
	Classify(ctx context.Context, s Session, specs []string, upload *Upload) (Request, error)
}

// Rebaser moves a session to the current interpreter and base, updating the store in one
// transaction (Store.ApplyRebase, which appends the "session.rebase" event by actor), and
// returns the session as it is now. ErrConflict: the session moved meanwhile;
// ErrUnavailable: the index or registry failed, and nothing changed.
type Rebaser interface {
	Rebase(ctx context.Context, sessionID, actor string) (Session, error)
}

// Layer is one published layer, as listed by a LayerLister.
type Layer struct {
	Kind    lock.Kind `json:"kind"` // base, ext, iso, python
	Ref     string    `json:"ref"`
	Digest  string    `json:"digest"`
	Key     string    `json:"key,omitempty"`
	Size    int64     `json:"size,omitempty"`
	Created time.Time `json:"created,omitzero"`
}

// LayerLister lists the layers a deployment knows.
type LayerLister interface {
	Layers(ctx context.Context) ([]Layer, error)
}

// GCReport says what a garbage collection removed: layers (by digest) and, added by the
// server, uploaded wheels no request holds any more (by file name).
type GCReport struct {
	Removed        []string `json:"removed"`
	RemovedUploads []string `json:"removed_uploads,omitempty"`
	FreedBytes     int64    `json:"freed_bytes"`
}

// WriteChecker is a Store that can prove it accepts writes, without changing what it
// holds; GET /readyz answers 200 only when CheckWrite succeeds.
type WriteChecker interface {
	CheckWrite(ctx context.Context) error
}

// VersionedSessions is a Store that keeps Session.Version as its doc says, from 0: a
// session at version 0 has never had a binding or a request, and every change GET env
// shows moves the version in its own transaction. Env is then served from memory while
// the version read with the session holds, version 0 (nothing to show) included.
type VersionedSessions interface {
	VersionsSessions()
}

// GCer collects layers no binding holds.
type GCer interface {
	GC(ctx context.Context) (GCReport, error)
}

// Decisions set by the server; the classifier sets its own (e.g. auto-approved, pending,
// rejected).
const (
	DecisionApproved         = "approved"          // approved by an approver: build an ext layer
	DecisionApprovedIsolated = "approved-isolated" // approved as an isolated layer: build iso
	DecisionDenied           = "denied"
)

// BuildIsolated reports whether the approver chose an isolated layer replacing the base.
func (r Request) BuildIsolated() bool { return r.Decision == DecisionApprovedIsolated }
