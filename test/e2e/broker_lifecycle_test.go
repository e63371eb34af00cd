package e2e

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/test/fixture"
)

// TestBrokerCrashMidBuild kills pylayer serve with SIGKILL while a request is building (a
// wheel of incompressible megabytes keeps the build busy), restarts it on the same
// database, and checks that the request ends bound to a layer that verifies, or failed with
// a reason, and never bound to something unpublished.
func TestBrokerCrashMidBuild(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := newBkDeploy(ctx, t, false)
	bkWrite(t, d.idxDir, fixture.Wheel{Name: "big", Version: "1.0", Files: []fixture.File{
		{Path: "big/__init__.py", Data: []byte("__version__ = '1.0'\n")},
		{Path: "big/blob.bin", Data: randomBytes(t, 96<<20)},
	}})
	s := d.serve
	se := s.newSession(t, d.owner)
	r := s.ask(t, se, "big==1.0")
	if r.State != "approved" {
		t.Fatalf("big: %s (%s), want approved", r.State, r.reasons())
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cur := s.request(t, se.Agent, r.ID, 0)
		if cur.State == "building" {
			break
		}
		if cur.State != "approved" || time.Now().After(deadline) {
			t.Fatalf("request went %s before it could be seen building; the build is too fast to crash", cur.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // into the build
	s.kill9()

	s2 := d.start(t)
	d.serve = s2
	got := s2.wait(t, se.Agent, r.ID)
	e := s2.env(t, se.Agent, se.ID)
	switch got.State {
	case "bound":
		if len(e.Bindings) != 1 || e.Bindings[0].Digest != got.Digest {
			t.Fatalf("resumed request bound to %s, env bindings %+v", got.Digest, e.Bindings)
		}
		d.verify(ctx, t, got.Digest)
		wantVersions(t, "resumed session", d.runSession(ctx, t, se.ID, "import big; print('\"big\": \"%s\"' % big.__version__)"), map[string]string{"big": "1.0"})
	case "failed":
		if got.Error == "" || len(e.Bindings) != 0 {
			t.Fatalf("failed request: error %q, bindings %+v; want a reason and no binding", got.Error, e.Bindings)
		}
	default:
		t.Fatalf("after the restart the request is %s", got.State)
	}
	var resumed bool
	events := s2.audit(t, d.owner, se.ID)
	for _, ev := range events {
		resumed = resumed || ev.Action == "resume"
	}
	if !resumed {
		t.Errorf("the audit log does not say the build was resumed: %+v", events)
	}
}

// TestBrokerRebase publishes a new base (pin 2.0) as current: a bound session keeps its
// base until it is rebased; after the rebase its base is the new one and its ext requests
// were asked again, the one that conflicts with the new base pin coming back pending.
func TestBrokerRebase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := newBkDeploy(ctx, t, false)
	s := d.serve
	se := s.newSession(t, d.owner)
	foo := s.wait(t, se.Agent, s.ask(t, se, "foo==1.0").ID)
	old := s.wait(t, se.Agent, s.ask(t, se, "needpin1").ID)
	if foo.State != "bound" || old.State != "bound" {
		t.Fatalf("foo %s (%s), needpin1 %s (%s): want both bound", foo.State, foo.reasons(), old.State, old.reasons())
	}
	wantVersions(t, "before the new base", d.versions(ctx, t, se.ID), map[string]string{"pin": "1.0", "foo": "1.0", "needpin1": "1.0"})

	lock2 := filepath.Join(d.h.home, "base2.lock.json")
	d.h.must(ctx, t, lockArgs(d.proxy.URL, lock2, []string{"pin"})...)
	base2 := d.publishBase(ctx, t, lock2)
	if base2 == d.baseRef {
		t.Fatal("the new base has the old digest")
	}
	if e := s.env(t, se.Agent, se.ID); e.Session.Base != d.baseRef || len(e.Bindings) != 2 {
		t.Fatalf("after a new current base, before rebase: base %s, bindings %+v; want %s unchanged", e.Session.Base, e.Bindings, d.baseRef)
	}
	if n := s.newSession(t, d.owner); s.env(t, n.Agent, n.ID).Session.Base != base2 {
		t.Errorf("a new session does not get the new current base %s", base2)
	}
	wantVersions(t, "not yet rebased", d.versions(ctx, t, se.ID), map[string]string{"pin": "1.0"})

	var refused *client.Error
	if _, err := s.api(t, se.Agent).Rebase(ctx, se.ID); !errors.As(err, &refused) || refused.Status != http.StatusForbidden {
		t.Errorf("agent rebase: %v, want 403", err)
	}
	ok(s.api(t, d.owner).Rebase(ctx, se.ID))(t)
	e := s.env(t, se.Agent, se.ID)
	if e.Session.Base != base2 || len(e.Base) != 1 || e.Base[0].Version != "2.0" {
		t.Fatalf("after rebase: base %s %+v, want %s (pin 2.0)", e.Session.Base, e.Base, base2)
	}
	var again map[string]bkRequest
	again = map[string]bkRequest{}
	for _, r := range d.requests(t, se.ID) {
		if r.ID != foo.ID && r.ID != old.ID && len(r.Specs) == 1 {
			again[r.Specs[0]] = r
		}
	}
	if len(again) != 2 {
		t.Fatalf("after rebase the session has new requests %+v, want foo==1.0 and needpin1 asked again", again)
	}
	nf := s.wait(t, se.Agent, again["foo==1.0"].ID)
	if nf.State != "bound" || nf.Digest == foo.Digest {
		t.Errorf("foo after rebase: %s %s (%s), want bound to a new ext layer over the new base", nf.State, nf.Digest, nf.reasons())
	}
	np := again["needpin1"]
	if np.State != "pending" || !np.Isolated || !strings.Contains(np.reasons(), "pin") || !strings.Contains(np.reasons(), "2.0") {
		t.Errorf("needpin1 after rebase: %s isolated=%v (%s), want pending with the base pin pin 2.0 named", np.State, np.Isolated, np.reasons())
	}
	e = s.env(t, se.Agent, se.ID)
	if len(e.Bindings) != 1 || e.Bindings[0].Digest != nf.Digest {
		t.Errorf("after rebase: bindings %+v, want only the new foo layer %s", e.Bindings, nf.Digest)
	}
	wantVersions(t, "rebased", d.versions(ctx, t, se.ID), map[string]string{"pin": "2.0", "foo": "1.0", "needpin1": "null"})
}
