package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
)

// fooScript prints the versions of the packages the broker suites bind.
const fooScript = `
import importlib, json
out = {}
for m in ("foo", "pin", "needpin1", "needpin2", "offlist"):
    try:
        out[m] = importlib.import_module(m).__version__
    except ImportError:
        out[m] = None
print(json.dumps(out, sort_keys=True))
`

// versions runs fooScript in a session and returns its answer as "foo=1.0 pin=1.0 ...".
func (d *bkDeploy) versions(ctx context.Context, t testing.TB, id string) string {
	t.Helper()
	return d.runSession(ctx, t, id, fooScript)
}

func wantVersions(t testing.TB, what, got string, want map[string]string) {
	t.Helper()
	t.Logf("%s: %s", what, got)
	for mod, v := range want {
		frag := `"` + mod + `": ` + v
		if v != "null" {
			frag = `"` + mod + `": "` + v + `"`
		}
		if !strings.Contains(got, frag) {
			t.Errorf("%s: sandbox reports %s, want %s", what, got, frag)
		}
	}
}

// TestBrokerScenarios drives one broker (pylayer serve) over HTTP against a real registry
// with TLS and auth and runs the sessions in bwrap with pylayer run --session: two sessions
// with their own foo, an off-list request approved and another denied, a base override
// approved as an isolated layer, policy rejections, an identical request bound without a
// build, and the audit log of all of it.
func TestBrokerScenarios(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	d := newBkDeploy(ctx, t, true)
	s := d.serve
	a, b := s.newSession(t, d.owner), s.newSession(t, d.owner)
	for _, se := range []bkSession{a, b} {
		if e := s.env(t, se.Agent, se.ID); e.Session.Base != d.baseRef || len(e.Base) != 1 || e.Base[0].Version != "1.0" || len(e.Bindings) != 0 {
			t.Fatalf("new session %s: env %+v, want base %s (pin 1.0) and no bindings", se.ID, e, d.baseRef)
		}
	}
	d.reg.ResetLog()

	// 1. foo==1.0 and foo==2.0, both allowlisted: auto-approved, one ext layer each.
	var foo1, foo2 bkRequest
	t.Run("auto-approved", func(t *testing.T) {
		foo1, foo2 = s.ask(t, a, "foo==1.0"), s.ask(t, b, "foo==2.0")
		for _, r := range []bkRequest{foo1, foo2} {
			if r.State != "approved" || r.Decision != "auto-approved" {
				t.Fatalf("request %v: %s/%s (%s), want approved/auto-approved", r.Specs, r.State, r.Decision, r.reasons())
			}
		}
		foo1, foo2 = s.wait(t, a.Agent, foo1.ID), s.wait(t, b.Agent, foo2.ID)
		if foo1.State != "bound" || foo2.State != "bound" || foo1.Digest == foo2.Digest {
			t.Fatalf("foo1 %s %s (%s), foo2 %s %s (%s): want both bound to different layers",
				foo1.State, foo1.Digest, foo1.reasons(), foo2.State, foo2.Digest, foo2.reasons())
		}
		for _, c := range []struct {
			se  bkSession
			req bkRequest
			foo string
		}{{a, foo1, "1.0"}, {b, foo2, "2.0"}} {
			e := s.env(t, c.se.Agent, c.se.ID)
			if e.Session.Base != d.baseRef {
				t.Errorf("session %s: base %s after an ext request, want %s unchanged", c.se.ID, e.Session.Base, d.baseRef)
			}
			if len(e.Bindings) != 1 || e.Bindings[0].Kind != "ext" || e.Bindings[0].Digest != c.req.Digest || e.Bindings[0].RequestID != c.req.ID {
				t.Errorf("session %s: bindings %+v, want one ext binding to %s", c.se.ID, e.Bindings, c.req.Digest)
			}
			d.verify(ctx, t, c.req.Digest)
			wantVersions(t, "session "+c.se.ID, d.versions(ctx, t, c.se.ID), map[string]string{"foo": c.foo, "pin": "1.0"})
			// Another host asks the broker over HTTP (--broker, agent token in $PYLAYER_TOKEN).
			wantVersions(t, "session "+c.se.ID+" via --broker", d.runSessionVia(ctx, t, c.se, fooScript), map[string]string{"foo": c.foo, "pin": "1.0"})
		}
	})

	// 5. The same request from another session on the same base: bound, no second push.
	t.Run("identical-request-no-build", func(t *testing.T) {
		c := s.newSession(t, d.owner)
		r := s.wait(t, c.Agent, s.ask(t, c, "foo==1.0").ID)
		if r.State != "bound" || r.Digest != foo1.Digest {
			t.Fatalf("identical request: %s %s (%s), want bound to %s", r.State, r.Digest, r.reasons(), foo1.Digest)
		}
		pushes := map[string]int{}
		for _, q := range d.reg.Requests() {
			if q.Method == http.MethodPut && strings.Contains(q.Path, "/manifests/ext-") {
				pushes[q.Path[strings.LastIndex(q.Path, "/")+1:]]++
			}
		}
		if pushes["ext-"+foo1.LockKey] != 1 || pushes["ext-"+foo2.LockKey] != 1 || len(pushes) != 2 {
			t.Errorf("ext manifest PUTs by tag: %v; want exactly one of ext-%s and of ext-%s", pushes, foo1.LockKey, foo2.LockKey)
		}
	})

	// 2. Off the allowlist: pending, approved by the owner, built and bound; another denied.
	var offlist bkRequest
	t.Run("approve-and-deny", func(t *testing.T) {
		p := s.ask(t, a, "offlist==1.0")
		if p.State != "pending" || !strings.Contains(p.reasons(), "offlist") {
			t.Fatalf("off-list request: %s (%s), want pending naming offlist", p.State, p.reasons())
		}
		polled := s.request(t, a.Agent, p.ID, time.Second)
		if polled.State != "pending" {
			t.Fatalf("a pending request long-polled to %s", polled.State)
		}
		if l := s.list(t, d.owner, client.Filter{State: broker.StatePending}); !hasRequest(l, p.ID) {
			t.Fatalf("GET /v1/requests?state=pending does not list %s: %+v", p.ID, l)
		}
		ok(s.api(t, d.owner).Approve(ctx, p.ID, false))(t)
		offlist = s.wait(t, a.Agent, p.ID)
		if offlist.State != "bound" || offlist.Approver != "alice" {
			t.Fatalf("approved request: %s approver %q (%s), want bound, approver alice", offlist.State, offlist.Approver, offlist.reasons())
		}
		if e := s.env(t, a.Agent, a.ID); !hasBinding(e, offlist.ID, offlist.Digest) {
			t.Fatalf("env of %s has no binding for the approved request: %+v", a.ID, e.Bindings)
		}
		wantVersions(t, "session a after approval", d.versions(ctx, t, a.ID), map[string]string{"foo": "1.0", "offlist": "1.0"})

		q := s.ask(t, a, "offlist2")
		if q.State != "pending" {
			t.Fatalf("second off-list request: %s, want pending", q.State)
		}
		before := len(s.env(t, a.Agent, a.ID).Bindings)
		ok(s.api(t, d.owner).Deny(ctx, q.ID, "not needed for this task"))(t)
		q = s.wait(t, a.Agent, q.ID)
		if q.State != "denied" || !strings.Contains(q.reasons(), "not needed for this task") {
			t.Fatalf("denied request: %s (%s), want denied with the reason", q.State, q.reasons())
		}
		if after := s.env(t, a.Agent, a.ID); len(after.Bindings) != before || hasBinding(after, q.ID, "") {
			t.Fatalf("a denied request changed the bindings: %+v", after.Bindings)
		}
	})

	// 3. A base override: pending with an isolated layer offered, approved as isolated.
	var iso bkRequest
	x := s.newSession(t, d.owner)
	t.Run("base-override-isolated", func(t *testing.T) {
		p := s.ask(t, x, "needpin2")
		t.Logf("needpin2: %s isolated=%v: %s", p.State, p.Isolated, p.reasons())
		if p.State != "pending" || !p.Isolated || !strings.Contains(p.reasons(), "pin") || !strings.Contains(p.reasons(), "1.0") {
			t.Fatalf("base override: %s isolated=%v (%s), want pending, isolated offered, naming the base pin pin 1.0", p.State, p.Isolated, p.reasons())
		}
		ok(s.api(t, d.owner).Approve(ctx, p.ID, true))(t)
		iso = s.wait(t, x.Agent, p.ID)
		if iso.State != "bound" {
			t.Fatalf("isolated request: %s (%s), want bound", iso.State, iso.reasons())
		}
		e := s.env(t, x.Agent, x.ID)
		if len(e.Bindings) != 1 || e.Bindings[0].Kind != "iso" || e.Bindings[0].Digest != iso.Digest {
			t.Fatalf("session x bindings %+v, want one iso binding to %s", e.Bindings, iso.Digest)
		}
		d.verify(ctx, t, iso.Digest)
		wantVersions(t, "isolated session", d.versions(ctx, t, x.ID), map[string]string{"pin": "2.0", "needpin2": "1.0", "foo": "null"})
		wantVersions(t, "the other session", d.versions(ctx, t, a.ID), map[string]string{"pin": "1.0", "foo": "1.0", "needpin2": "null"})
	})

	// 4. Rejected by policy, naming the package; nothing bound.
	t.Run("rejected", func(t *testing.T) {
		r := s.newSession(t, d.owner)
		for _, c := range []struct{ spec, name string }{
			{"sdistonly", "sdistonly"}, {"evil==1.0", "evil"}, {"tampered", "tampered"}, {"nosuchpackage", "nosuchpackage"},
		} {
			q := s.ask(t, r, c.spec)
			t.Logf("%s: %s: %s", c.spec, q.State, q.reasons())
			if q.State != "rejected" || !strings.Contains(q.reasons(), c.name) {
				t.Errorf("%s: %s (%s), want rejected naming %s", c.spec, q.State, q.reasons(), c.name)
			}
		}
		if e := s.env(t, r.Agent, r.ID); len(e.Bindings) != 0 || len(e.Requests) != 0 {
			t.Errorf("rejected requests left bindings %+v or open requests %+v", e.Bindings, e.Requests)
		}
	})

	// 9. The audit log says which digests a session was bound to and who approved what.
	t.Run("audit", func(t *testing.T) {
		events := s.audit(t, d.owner, a.ID)
		bound := map[string]bool{}
		var approvedBy string
		for _, ev := range events {
			if ev.Action == "bound" {
				for _, r := range []bkRequest{foo1, offlist} {
					if ev.RequestID == r.ID && strings.Contains(ev.Detail, r.Digest) {
						bound[r.ID] = true
					}
				}
			}
			if ev.Action == "request.approved" && ev.RequestID == offlist.ID {
				approvedBy = ev.Actor
			}
			for _, tok := range []string{d.owner, a.Agent} {
				if strings.Contains(ev.Detail, tok) || ev.Actor == tok {
					t.Errorf("audit event %+v carries a token", ev)
				}
			}
		}
		if !bound[foo1.ID] || !bound[offlist.ID] {
			t.Errorf("audit of %s does not record both bindings (foo %s, offlist %s): %+v", a.ID, foo1.Digest, offlist.Digest, events)
		}
		if approvedBy != "alice" {
			t.Errorf("audit: approval of %s by %q, want alice", offlist.ID, approvedBy)
		}
		events = s.audit(t, d.owner, x.ID)
		var isoOK bool
		for _, ev := range events {
			isoOK = isoOK || (ev.Action == "request.approved-isolated" && ev.Actor == "alice" && ev.RequestID == iso.ID)
		}
		if !isoOK {
			t.Errorf("audit of %s has no isolated approval by alice: %+v", x.ID, events)
		}
	})

	// 10. Asynchronous answers (Prefer: respond-async): accepted classifying before the
	// index is asked, then classified in the background: one bound to foo 1.0's layer
	// (built: its lock records what was asked for), a sdist-only one rejected with the
	// reason; both audited.
	t.Run("async", func(t *testing.T) {
		c := s.newSession(t, d.owner)
		api := s.api(t, c.Agent)
		for _, tc := range []struct{ spec, state, reason string }{
			{"foo>=1.0,<2", "bound", ""}, {"sdistonly==1.0", "rejected", "sdistonly"},
		} {
			r := ok(api.AskAsync(t.Context(), c.ID, tc.spec))(t)
			if r.State != broker.StateClassifying || r.ID == "" {
				t.Fatalf("%s asked asynchronously: %s (%s), want classifying at once", tc.spec, r.State, r.Error)
			}
			got := s.wait(t, c.Agent, r.ID)
			if string(got.State) != tc.state || !strings.Contains(got.reasons(), tc.reason) {
				t.Errorf("%s classified in the background: %s (%s), want %s naming %q", tc.spec, got.State, got.reasons(), tc.state, tc.reason)
			}
		}
		var classified int
		for _, ev := range s.audit(t, d.owner, c.ID) {
			if ev.Action == "request.classify" && ev.Actor == "broker" && ev.Decision != "" {
				classified++
			}
		}
		if classified != 2 {
			t.Errorf("audit of %s: %d request.classify events with a decision, want 2", c.ID, classified)
		}
	})

	t.Run("authorization", func(t *testing.T) { brokerAuthz(t, d) })
	t.Run("bad-input", func(t *testing.T) { brokerBadInput(t, d) })
	for _, tok := range []string{d.admin, d.owner, d.owner2, a.Agent, b.Agent, x.Agent} {
		if strings.Contains(s.stderr.String(), tok) {
			t.Errorf("a token appears in the broker's log")
		}
	}
}

func hasRequest(l []bkRequest, id string) bool {
	for _, r := range l {
		if r.ID == id {
			return true
		}
	}
	return false
}

// hasBinding reports whether e binds request id (to digest, unless digest is "").
func hasBinding(e broker.Env, id, digest string) bool {
	for _, b := range e.Bindings {
		if b.RequestID == id && (digest == "" || b.Digest == digest) {
			return true
		}
	}
	return false
}
