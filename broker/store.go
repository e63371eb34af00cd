package broker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/pylayer/pylayer/layers/lock"
)

// Sentinel errors every Store wraps, so callers can tell cases apart with errors.Is.
var (
	// ErrNotFound: the session, request or token does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the ID or hash exists already, or the object is not in the state the
	// operation needs.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: an argument the store refuses (an empty ID, a changed immutable field).
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable: something the broker depends on (the package index, the registry,
	// the database) failed in a way that may pass: nothing was decided or stored, and the
	// same call may succeed later. The API answers 503 with Retry-After.
	ErrUnavailable = errors.New("temporarily unavailable")
)

// State is where a request is in its lifecycle.
type State string

// Request states. Terminal states end a long poll.
const (
	// StateClassifying: received from a client that prefers an asynchronous answer; the
	// broker resolves and classifies it in the background (Store.Classified).
	StateClassifying State = "classifying"
	StatePending     State = "pending"  // waits for an approver
	StateApproved    State = "approved" // auto-approved or approved; waits for the builder
	StateBuilding    State = "building" // claimed by a builder (ClaimBuild)
	StateBuilt       State = "built"    // the layer exists; not yet bound
	StateBound       State = "bound"    // bound to the session: done
	StateDenied      State = "denied"   // an approver said no
	StateRejected    State = "rejected" // policy said no (sdist only, denylisted, unresolvable, ...)
	StateFailed      State = "failed"   // the build failed
)

// States lists every request state, in lifecycle order.
var States = []State{StateClassifying, StatePending, StateApproved, StateBuilding, StateBuilt, StateBound, StateDenied, StateRejected, StateFailed}

// Valid reports whether s is one of States.
func (s State) Valid() bool { return slices.Contains(States, s) }

// Terminal reports whether a request in state s will not change any more.
func Terminal(s State) bool {
	switch s {
	case StateBound, StateDenied, StateRejected, StateFailed:
		return true
	}
	return false
}

// Token roles.
const (
	RoleAdmin = "admin" // acts on every session
	RoleOwner = "owner" // acts on the sessions whose Owner is the token's Subject
	RoleAgent = "agent" // sees only the session whose ID is the token's Subject
)

// Binding kinds: the layer kinds of layers/lock that a session binds.
const (
	KindExt = lock.KindExt
	KindIso = lock.KindIso
)

// Session is one sandbox workspace and what it is bound to.
type Session struct {
	ID          string    `json:"id"`
	Owner       string    `json:"owner"`
	Created     time.Time `json:"created"`
	Interpreter string    `json:"interpreter,omitempty"` // digest (sha256:...) or ""
	Base        string    `json:"base,omitempty"`        // digest (sha256:...) or ""
	BaseLock    []byte    `json:"-"`                     // the base lock JSON the session is bound to
	// Version moves (the store's triggers move it) whenever anything GET env shows
	// changes: the base, a binding, a request of the session. Stores set it on read.
	Version int64 `json:"-"`
}

// Binding records one ext or iso layer bound to a session.
type Binding struct {
	SessionID string    `json:"session_id"`
	Kind      lock.Kind `json:"kind"` // KindExt or KindIso
	Digest    string    `json:"digest"`
	Ref       string    `json:"ref"`
	RequestID string    `json:"request_id,omitempty"`
	Created   time.Time `json:"created"`
}

// Pkg is one wheel of a request or audit event.
type Pkg struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Filename string `json:"filename,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	Size     int64  `json:"size,omitempty"`
}

// Request is an agent's request for packages and everything decided about it.
type Request struct {
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	Specs     []string  `json:"specs"`
	Upload    string    `json:"upload,omitempty"` // file name of an uploaded wheel, or ""
	State     State     `json:"state"`
	Decision  string    `json:"decision,omitempty"`
	Reasons   []string  `json:"reasons,omitempty"`
	Isolated  bool      `json:"isolated"` // the approver may choose an isolated (iso) layer
	Packages  []Pkg     `json:"packages,omitempty"`
	LockKey   string    `json:"lock_key,omitempty"`
	Digest    string    `json:"digest,omitempty"`
	Error     string    `json:"error,omitempty"`
	Approver  string    `json:"approver,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
}

// Token is a bearer token as stored: only the hash of the secret.
type Token struct {
	Hash    string    `json:"-"` // sha256 hex of the secret
	Role    string    `json:"role"`
	Subject string    `json:"subject"` // user name, or session id for agents
	Created time.Time `json:"created"`
}

// AuditEvent is one line of the append-only audit log.
type AuditEvent struct {
	ID        int64     `json:"id"`
	Time      time.Time `json:"time"`
	Actor     string    `json:"actor"`
	Action    string    `json:"action"`
	SessionID string    `json:"session_id,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	Packages  []Pkg     `json:"packages,omitempty"`
	Decision  string    `json:"decision,omitempty"`
	Detail    string    `json:"detail,omitempty"`
}

// Key names a row of a list ordered by (Created, ID): a keyset cursor. A page after a key
// starts at the row that follows it, so rows added or removed meanwhile neither repeat nor
// shift the rows that follow. The zero Key starts at the beginning.
type Key struct {
	Time time.Time
	ID   string
}

// IsZero reports whether k is the zero Key.
func (k Key) IsZero() bool { return k.Time.IsZero() && k.ID == "" }

// SessionFilter selects sessions; zero fields match everything. Limit 0 is no limit.
type SessionFilter struct {
	Owner        string
	Since, Until time.Time // Created in [Since, Until)
	After        Key       // start after this (Created, ID)
	Desc         bool      // newest first
	Limit        int
}

// RequestFilter selects requests; zero fields match everything. Limit 0 is no limit.
type RequestFilter struct {
	SessionID    string
	State        State
	Owner        string    // the owner of the request's session
	Since, Until time.Time // Created in [Since, Until)
	UpdatedSince time.Time // Updated at or after: what changed since a version
	After        Key       // start after this (Created, ID)
	Desc         bool      // newest first
	Limit        int
}

// AuditFilter selects audit events; zero fields match everything. Limit 0 is no limit.
type AuditFilter struct {
	SessionID    string
	Owner        string // the owner of the event's session
	Action       string
	Since, Until time.Time // Time in [Since, Until)
	AfterID      int64     // start after this ID (before it with Desc)
	Desc         bool      // newest first
	Limit        int
}

// RebasePlan is everything a rebase changes, applied by Store.ApplyRebase in one
// transaction: the session's new base, the bindings it keeps, the requests filed again
// against the new base and the audit events that record it all.
type RebasePlan struct {
	SessionID string
	// FromBase is the base the plan was made from: if the session is on another base by
	// the time the plan is applied (a concurrent rebase), ApplyRebase refuses with
	// ErrConflict and changes nothing.
	FromBase    string
	Interpreter string
	Base        string
	BaseLock    []byte
	Bindings    []Binding    // replace every binding of the session
	Requests    []Request    // created, each with its own ID
	Audit       []AuditEvent // appended
}

// PublishedLayer is a layer that was just published (or found published) for a lock on a
// base and interpreter, and the requests it serves without a build: approved, without an
// upload, whose classification resolved lock key LockKey, built isolated or not as
// Isolated says (Request.BuildIsolated), of a session on Base with Interpreter. A builder
// that checked that the lock fits that base and interpreter binds them all at once
// (Store.BindApproved) instead of claiming each.
type PublishedLayer struct {
	Base, Interpreter string
	LockKey           string
	Isolated          bool
	Kind              lock.Kind // KindExt or KindIso: the layer's
	Digest, Ref       string
}

// Store keeps sessions, tokens, requests, bindings and the audit log. Implementations
// must be safe for concurrent use and wrap ErrNotFound, ErrConflict and ErrInvalid.
// Lists are ordered oldest first. Times round-trip with nanosecond precision in UTC.
//
// Every change that takes audit events appends them in the transaction that makes the
// change: a crash or a failed insert leaves both or neither, never one without the other.
type Store interface {
	// CreateSession adds s and appends audit; ErrConflict if its ID exists.
	CreateSession(ctx context.Context, s Session, audit ...AuditEvent) error
	// CreateSessionToken adds s and its agent token tok (role agent, subject s.ID) and
	// appends audit, in one transaction: neither is stored without the other.
	// ErrConflict if the session's ID or the token's hash exists.
	CreateSessionToken(ctx context.Context, s Session, tok Token, audit ...AuditEvent) error
	GetSession(ctx context.Context, id string) (Session, error)
	// ListSessions returns the sessions of owner, or all of them for "".
	ListSessions(ctx context.Context, owner string) ([]Session, error)
	// Sessions returns the sessions f selects, ordered by (Created, ID).
	Sessions(ctx context.Context, f SessionFilter) ([]Session, error)
	SetSessionBase(ctx context.Context, id, interpreter, base string, baseLock []byte) error

	// PutToken adds t and appends audit; ErrConflict if its hash exists.
	PutToken(ctx context.Context, t Token, audit ...AuditEvent) error
	GetToken(ctx context.Context, hash string) (Token, error)

	// CreateRequest adds r and appends audit; ErrConflict if its ID exists, ErrNotFound
	// without its session.
	CreateRequest(ctx context.Context, r Request, audit ...AuditEvent) error
	// CreateBound creates r already bound, with its binding b and audit, in one
	// transaction: r.State is bound, b names r and its session, and r.Digest is b's.
	CreateBound(ctx context.Context, r Request, b Binding, audit ...AuditEvent) error
	// Classified records the classification of request r.ID, which must be classifying
	// (else ErrConflict: another replica's classification of it came first) and of
	// session r.SessionID (else ErrInvalid), in one
	// transaction: the request takes r's State (approved, pending or rejected; or bound,
	// with its binding b, whose Digest it records), Decision, Reasons, Isolated, Packages
	// and LockKey, its Error is cleared, b (nil unless bound) is added to its session,
	// and audit is appended.
	Classified(ctx context.Context, r Request, b *Binding, audit ...AuditEvent) error
	GetRequest(ctx context.Context, id string) (Request, error)
	// UpdateRequest runs fn on the stored request inside one transaction and writes the
	// result unless fn fails (its error is returned as is). fn must not change ID,
	// SessionID or Created, and must not call the store.
	UpdateRequest(ctx context.Context, id string, fn func(*Request) error) error
	// Transition is UpdateRequest for a change that is audited: fn returns the event
	// that records it, appended in the same transaction.
	Transition(ctx context.Context, id string, fn func(*Request) (AuditEvent, error)) error
	// ListRequests returns the requests f selects, ordered by (Created, ID).
	ListRequests(ctx context.Context, f RequestFilter) ([]Request, error)
	// Leases claims builds with leases (lease.go): ClaimBuild, RenewBuild, BindBuild, ...
	Leases
	// Bind finishes a build in one transaction: the request b.RequestID, which must be
	// building or built and under no build lease (else ErrConflict; the holder of its
	// lease binds with BindBuild), records b.Digest and lockKey and becomes bound, b is
	// added to its session and audit is appended.
	Bind(ctx context.Context, b Binding, lockKey string, audit AuditEvent) error
	// ApplyRebase applies p in one transaction (see RebasePlan).
	ApplyRebase(ctx context.Context, p RebasePlan) error
	// BindApproved binds up to limit of the requests that a published layer serves as
	// they are (see PublishedLayer), oldest first, in one transaction: each becomes bound
	// to the layer with its own binding and the audit event audit returns for it, as
	// CreateBound would have recorded it had the layer been published when it was asked
	// for. Requests under a build lease, or being claimed at the moment, are left to their
	// claimer. It returns the requests as bound.
	BindApproved(ctx context.Context, p PublishedLayer, limit int, audit func(Request) AuditEvent) ([]Request, error)

	AddBinding(ctx context.Context, b Binding) error
	Bindings(ctx context.Context, sessionID string) ([]Binding, error)
	// ReplaceBindings swaps every binding of the session for b in one transaction.
	ReplaceBindings(ctx context.Context, sessionID string, b []Binding) error

	// Audit appends e (its ID is assigned by the store). There is no update, and no
	// delete but PruneAudit's of events older than a retention horizon.
	Audit(ctx context.Context, e AuditEvent) error
	// AuditLog returns the events of a session, or all of them for "".
	AuditLog(ctx context.Context, sessionID string) ([]AuditEvent, error)
	// AuditEvents returns the events f selects, ordered by ID.
	AuditEvents(ctx context.Context, f AuditFilter) ([]AuditEvent, error)
	// PruneAudit deletes the events older than before and appends e, whose Detail says
	// how many went, in one transaction; it returns that count. The horizon only moves
	// forward (an earlier before deletes nothing), and the database refuses to delete an
	// event at or after it.
	PruneAudit(ctx context.Context, before time.Time, e AuditEvent) (int64, error)

	Close() error
}
