package broker

import (
	"context"
	"strings"
	"time"
)

// DefaultBuildLease is how long a claimed build stays its holder's without a renewal.
// A worker renews every quarter of it, so a replica that dies is reclaimed by another
// within the lease and one pass of the reclaim loop (a few seconds) after it stopped.
const DefaultBuildLease = 20 * time.Second

// Lease is a claim on work by one holder (a replica's worker) for TTL from Now. Replicas
// compare their own clocks with the stored expiry: keep hosts' clocks in sync (NTP) to
// well within the TTL.
type Lease struct {
	Holder string        // unique per process: two replicas never share one
	TTL    time.Duration // > 0
	Now    time.Time     // the holder's clock; zero means time.Now()
}

// Until is when a lease taken or renewed now expires.
func (l Lease) Until() time.Time { return l.At().Add(l.TTL) }

// At is the lease's clock reading: Now, or the current time when Now is zero.
func (l Lease) At() time.Time {
	if l.Now.IsZero() {
		return time.Now()
	}
	return l.Now
}

// Leases is how builders on any number of replicas share one store's work: a request is
// built by the holder of its lease, and a layer (a lock key) by the holder of the named
// lease on it, so each distinct layer is built once however many replicas race.
//
// A lease that expires (its holder died, or stopped renewing) is free: ClaimBuild hands
// its request to the next claimer, AcquireLease its name to the next caller. Every
// method wraps ErrInvalid for a lease without a holder or a positive TTL.
type Leases interface {
	// ClaimBuild claims the oldest request that is approved, or building or built under
	// an expired lease, and returns it building under l. Concurrent claimers never get
	// the same request (FOR UPDATE SKIP LOCKED where the database has row locks). Taking
	// over an expired lease appends a "resume" audit event in the same transaction. ok
	// is false when nothing is claimable. An approved request (without an upload) whose
	// lock key another request is building or built under a live lease, isolated or not
	// alike, is not claimable: that build binds it with the rest of its crowd
	// (BindApproved) once the layer is published; when that request leaves building or
	// its lease expires, it is claimable again.
	ClaimBuild(ctx context.Context, l Lease) (r Request, ok bool, err error)
	// RenewBuild extends l.Holder's lease on request id to l.Until(); ErrConflict when
	// l.Holder holds it no more (another claimed it after it expired, or it left
	// building): the holder must stop, and not write the request again.
	RenewBuild(ctx context.Context, id string, l Lease) error
	// BindBuild is Bind for the holder of the request's lease: ErrConflict when another
	// holder holds it. The lease ends with the binding.
	BindBuild(ctx context.Context, l Lease, b Binding, lockKey string, audit AuditEvent) error
	// FinishBuild is Transition for the holder of the request's lease (ErrConflict when
	// another holds it), e.g. to record a failed build. The lease ends with it.
	FinishBuild(ctx context.Context, id string, l Lease, fn func(*Request) (AuditEvent, error)) error

	// AcquireLease takes, or renews, the lease named name for l.Holder. ok is false when
	// another holder's lease on name has not expired.
	AcquireLease(ctx context.Context, name string, l Lease) (ok bool, err error)
	// ReleaseLease ends holder's lease on name; it does nothing when holder holds none.
	ReleaseLease(ctx context.Context, name, holder string) error
}

// ChangeFeed is a Store that tells every replica about changes to requests made by any of
// them (PostgreSQL's LISTEN/NOTIFY), so that long polls end when another replica binds.
type ChangeFeed interface {
	// Follow calls changed with every change of a request made in the store by anyone,
	// until ctx ends; it returns ctx's error. status(nil) says it listens; status(err)
	// that it stopped listening (why), after which it reconnects by itself and, once it
	// listens again, calls changed with a Change of no request once: anything may have
	// changed meanwhile.
	Follow(ctx context.Context, changed func(Change), status func(error)) error
}

// Change is one change a ChangeFeed tells of.
type Change struct {
	RequestID string // "": any request may have changed
	// Open says that the change left the request in a state that is not terminal
	// (approved, building ...): a long poll on it need not read it again. False when it
	// became terminal, and whenever the store does not say.
	Open bool
}

// ChangePayload is how a store announces that request id changed to state st: the ID
// alone when st is terminal (what stores announced before they told states, so a replica
// of either age wakes its long polls on it), else the ID, a space and the state.
// ParseChangePayload reads it back.
func ChangePayload(id string, st State) string {
	if Terminal(st) || st == "" {
		return id
	}
	return id + " " + string(st)
}

// ParseChangePayload reads a ChangePayload.
func ParseChangePayload(p string) Change {
	id, st, ok := strings.Cut(p, " ")
	return Change{RequestID: id, Open: ok && State(st).Valid() && !Terminal(State(st))}
}
