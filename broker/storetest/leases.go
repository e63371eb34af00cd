package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// leaseTTL is the TTL of the suite's leases; their clock is Lease.Now, so no case waits.
const leaseTTL = 30 * time.Second

// lease is holder's lease read on a clock at T0 + sec seconds.
func lease(holder string, sec int) broker.Lease {
	return broker.Lease{Holder: holder, TTL: leaseTTL, Now: T0.Add(time.Duration(sec) * time.Second)}
}

func claim(t *testing.T, s broker.Store, l broker.Lease) (string, bool) {
	t.Helper()
	r, ok, err := s.ClaimBuild(context.Background(), l)
	must(t, err)
	if ok && (r.State != broker.StateBuilding || r.ID == "") {
		t.Fatalf("ClaimBuild returned %s in state %s, want building", r.ID, r.State)
	}
	return r.ID, ok
}

func wantClaim(t *testing.T, s broker.Store, l broker.Lease, want string) {
	t.Helper()
	id, ok := claim(t, s, l)
	if want == "" && ok {
		t.Fatalf("%s at %s claimed %s, want nothing claimable", l.Holder, l.Now.Sub(T0), id)
	}
	if want != "" && (!ok || id != want) {
		t.Fatalf("%s at %s claimed %q (ok=%v), want %s", l.Holder, l.Now.Sub(T0), id, ok, want)
	}
}

// testLeaseExpiry: a dead holder's build is claimed by another once its lease expires,
// the takeover is audited, and the dead holder can no longer renew, bind or fail it.
func testLeaseExpiry(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StateApproved, 0)))
	wantClaim(t, s, lease("w1", 0), "r1")
	wantClaim(t, s, lease("w2", 29), "") // w1's lease runs until 30 s
	wantClaim(t, s, lease("w2", 31), "r1")
	l, _ := s.AuditLog(ctx, "s1")
	if len(l) != 1 || l[0].Action != "resume" || l[0].RequestID != "r1" || !strings.Contains(l[0].Detail, "w1") {
		t.Errorf("audit after the takeover: %+v, want one resume event naming w1", l)
	}

	// w1 comes back (a paused process): its lease is gone.
	wantErr(t, "renew by the old holder", s.RenewBuild(ctx, "r1", lease("w1", 32)), broker.ErrConflict)
	b := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", Ref: "r@sha256:0b", RequestID: "r1", Created: T0}
	wantErr(t, "bind by the old holder", s.BindBuild(ctx, lease("w1", 32), b, "k", event("bound", "s1", "r1")), broker.ErrConflict)
	wantErr(t, "bind outside the lease", s.Bind(ctx, b, "k", event("bound", "s1", "r1")), broker.ErrConflict)
	wantErr(t, "fail by the old holder", s.FinishBuild(ctx, "r1", lease("w1", 32), func(r *broker.Request) (broker.AuditEvent, error) {
		r.State = broker.StateFailed
		return event("build-failed", "s1", "r1"), nil
	}), broker.ErrConflict)
	if bs, _ := s.Bindings(ctx, "s1"); len(bs) != 0 {
		t.Fatalf("refused binds bound %+v", bs)
	}
	if r, _ := s.GetRequest(ctx, "r1"); r.State != broker.StateBuilding {
		t.Fatalf("after refused changes r1 is %s, want building", r.State)
	}

	must(t, s.BindBuild(ctx, lease("w2", 33), b, "k", event("bound", "s1", "r1")))
	if r, _ := s.GetRequest(ctx, "r1"); r.State != broker.StateBound {
		t.Fatalf("after w2's bind r1 is %s, want bound", r.State)
	}
	wantClaim(t, s, lease("w3", 10000), "") // bound is never claimable, whatever the clock
	wantErr(t, "renew after the bind", s.RenewBuild(ctx, "r1", lease("w2", 34)), broker.ErrConflict)

	// Left building or built by a pylayer that kept no leases: claimable at once.
	must(t, s.CreateRequest(ctx, request("old-building", "s1", broker.StateBuilding, 1)))
	must(t, s.CreateRequest(ctx, request("old-built", "s1", broker.StateBuilt, 2)))
	wantClaim(t, s, lease("w3", 0), "old-building")
	wantClaim(t, s, lease("w3", 0), "old-built")
	wantClaim(t, s, lease("w3", 0), "")
}

// testClaimLeavesCrowd: an approved request waiting for the layer another request builds
// under a live lease (the same lock key, isolated or not alike, no upload) is left to that
// build's crowd bind, not claimed; it is claimable again once that lease expires or its
// request is bound.
func testClaimLeavesCrowd(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateSession(ctx, session("s2", "bob", 0)))
	add := func(id, session, key, decision, upload string, i int) {
		t.Helper()
		r := request(id, session, broker.StateApproved, i)
		r.LockKey, r.Decision, r.Upload = key, decision, upload
		must(t, s.CreateRequest(ctx, r))
	}
	add("first", "s1", "k1", "auto-approved", "", 0)
	add("same", "s2", "k1", "human-approved", "", 1)
	add("other", "s1", "k2", "auto-approved", "", 2)
	add("iso", "s2", "k1", broker.DecisionApprovedIsolated, "", 3)
	add("upload", "s1", "k1", "auto-approved", "w-1.0-py3-none-any.whl", 4)
	add("nokey", "s2", "", "auto-approved", "", 5)

	wantClaim(t, s, lease("w1", 0), "first")
	for _, want := range []string{"other", "iso", "upload", "nokey", ""} { // not "same"
		wantClaim(t, s, lease("w2", 1), want)
	}
	// first's lease expires: first is claimed again (the oldest), and "same" is left to it again.
	wantClaim(t, s, lease("w3", 31), "first")
	wantClaim(t, s, lease("w3", 31), "")
	// first is bound: nothing builds k1 any more, and "same" is claimable.
	b := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", Ref: "r@sha256:0b", RequestID: "first", Created: T0}
	must(t, s.BindBuild(ctx, lease("w3", 32), b, "k1", event("bound", "s1", "first")))
	wantClaim(t, s, lease("w3", 32), "same")
}

// testLeaseRenew: a renewed lease is not claimable until its new expiry.
func testLeaseRenew(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StateApproved, 0)))
	wantClaim(t, s, lease("w1", 0), "r1")
	must(t, s.RenewBuild(ctx, "r1", lease("w1", 20))) // until 50 s
	wantClaim(t, s, lease("w2", 40), "")
	must(t, s.RenewBuild(ctx, "r1", lease("w1", 45))) // until 75 s
	wantClaim(t, s, lease("w2", 70), "")
	wantErr(t, "renew by another holder", s.RenewBuild(ctx, "r1", lease("w2", 71)), broker.ErrConflict)
	wantErr(t, "renew of a missing request", s.RenewBuild(ctx, "nope", lease("w1", 71)), broker.ErrConflict)
	wantClaim(t, s, lease("w2", 76), "r1")
	wantErr(t, "renew without a holder", s.RenewBuild(ctx, "r1", broker.Lease{TTL: time.Second}), broker.ErrInvalid)
}

// testLeaseFinish: the holder records the outcome with its audit event and the lease
// ends; nobody else can.
func testLeaseFinish(t *testing.T, s broker.Store) {
	ctx := context.Background()
	must(t, s.CreateSession(ctx, session("s1", "alice", 0)))
	must(t, s.CreateRequest(ctx, request("r1", "s1", broker.StateApproved, 0)))
	wantClaim(t, s, lease("w1", 0), "r1")
	failed := func(r *broker.Request) (broker.AuditEvent, error) {
		r.State, r.Error = broker.StateFailed, "no space left"
		return event("build-failed", "s1", "r1"), nil
	}
	wantErr(t, "finish by another holder", s.FinishBuild(ctx, "r1", lease("w2", 1), failed), broker.ErrConflict)
	wantErr(t, "finish of a missing request", s.FinishBuild(ctx, "nope", lease("w1", 1), failed), broker.ErrNotFound)
	refused := errors.New("refused by fn")
	wantErr(t, "fn's error", s.FinishBuild(ctx, "r1", lease("w1", 1), func(*broker.Request) (broker.AuditEvent, error) {
		return broker.AuditEvent{}, refused
	}), refused)
	must(t, s.RenewBuild(ctx, "r1", lease("w1", 2))) // fn's error left the lease as it was
	must(t, s.FinishBuild(ctx, "r1", lease("w1", 3), failed))
	r, _ := s.GetRequest(ctx, "r1")
	if r.State != broker.StateFailed || r.Error != "no space left" {
		t.Errorf("after FinishBuild: %s %q, want failed with the error", r.State, r.Error)
	}
	if l, _ := s.AuditLog(ctx, "s1"); len(l) != 1 || l[0].Action != "build-failed" {
		t.Errorf("audit after FinishBuild: %+v", l)
	}
	wantErr(t, "renew after finishing", s.RenewBuild(ctx, "r1", lease("w1", 4)), broker.ErrConflict)
	wantClaim(t, s, lease("w2", 10000), "")
}

func acquire(t *testing.T, s broker.Store, name string, l broker.Lease, want bool) {
	t.Helper()
	ok, err := s.AcquireLease(context.Background(), name, l)
	must(t, err)
	if ok != want {
		t.Fatalf("AcquireLease(%s) by %s at %s = %v, want %v", name, l.Holder, l.Now.Sub(T0), ok, want)
	}
}

// testNamedLeases: one holder at a time per name, renewals, expiry and release.
func testNamedLeases(t *testing.T, s broker.Store) {
	ctx := context.Background()
	acquire(t, s, "layer-a", lease("w1", 0), true)
	acquire(t, s, "layer-b", lease("w2", 0), true) // names are independent
	acquire(t, s, "layer-a", lease("w2", 10), false)
	acquire(t, s, "layer-a", lease("w1", 20), true) // renewed: until 50 s
	acquire(t, s, "layer-a", lease("w2", 40), false)
	acquire(t, s, "layer-a", lease("w2", 51), true) // expired: w2 takes it
	acquire(t, s, "layer-a", lease("w1", 52), false)
	must(t, s.ReleaseLease(ctx, "layer-a", "w1")) // not w1's: nothing happens
	acquire(t, s, "layer-a", lease("w3", 53), false)
	must(t, s.ReleaseLease(ctx, "layer-a", "w2"))
	acquire(t, s, "layer-a", lease("w3", 53), true)
	must(t, s.ReleaseLease(ctx, "never-taken", "w3"))
	if _, err := s.AcquireLease(ctx, "", lease("w1", 0)); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("a lease without a name: err = %v, want ErrInvalid", err)
	}
	if _, err := s.AcquireLease(ctx, "x", broker.Lease{Holder: "w1"}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("a lease without a TTL: err = %v, want ErrInvalid", err)
	}
}

// testNamedLeasesConcurrent: replicas racing for one layer's lease, again and again:
// exactly one wins each round.
func testNamedLeasesConcurrent(t *testing.T, s broker.Store) {
	ctx := context.Background()
	const rounds, racers = 20, 8
	for round := range rounds {
		name := fmt.Sprintf("layer-%d", round)
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				ok, err := s.AcquireLease(ctx, name, lease(fmt.Sprintf("w%d", i), 0))
				if err != nil {
					t.Error(err)
				}
				if ok {
					won.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d racers acquired the lease, want exactly 1", round, n)
		}
	}
}
