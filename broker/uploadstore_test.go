package broker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// forgetful is the fake classifier with the builder's hook: it records forgotten uploads.
type forgetful struct {
	fakeClassifier
	mu     sync.Mutex
	forgot []string
}

func (f *forgetful) ForgetUpload(ctx context.Context, u broker.Upload) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, u.SHA256[:8]+"/"+u.Filename)
	return nil
}

func (f *forgetful) forgotten() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.forgot...)
}

func (e *env) mustUpload(token, session, name, content string) broker.Request {
	e.t.Helper()
	code, b := e.upload(token, session, name, content)
	var r broker.Request
	if code != http.StatusCreated || json.Unmarshal(b, &r) != nil {
		e.t.Fatalf("upload %s: %d %s", name, code, b)
	}
	return r
}

func (e *env) stored(session, name, content string) string {
	return filepath.Join("uploads", session, sha(content), name)
}

func TestUploadQuota(t *testing.T) {
	w1, w2, w3 := wheelBytes(t, "one", "1.0", nil), wheelBytes(t, "two", "1.0", nil), wheelBytes(t, "three", "1.0", nil)
	t.Run("count", func(t *testing.T) {
		e := newEnv(t, func(o *broker.Options) { o.Quota.Count = 2 })
		r1 := e.mustUpload(e.agentA, e.sesA, "one-1.0-py3-none-any.whl", w1)
		e.mustUpload(e.agentA, e.sesA, "two-1.0-py3-none-any.whl", w2)
		before := e.snapshot()
		ct, body := multipartBody(t, [3]string{"wheel", "three-1.0-py3-none-any.whl", w3})
		code, h, b := e.do("POST", "/v1/sessions/"+e.sesA+"/requests", e.agentA, ct, body)
		var ae struct{ Error, Hint string }
		if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || json.Unmarshal(b, &ae) != nil ||
			!strings.Contains(ae.Error, "quota") || !strings.Contains(ae.Hint, "approver") {
			t.Errorf("third upload: %d %s, want 429 with a hint", code, b)
		}
		e.unchanged("an upload over the quota", before)
		// Another session has its own quota.
		e.mustUpload(e.agentB, e.sesB, "three-1.0-py3-none-any.whl", w3)
		// Denying an upload deletes it and frees its place.
		e.mustDo("POST", "/v1/requests/"+r1.ID+"/deny", e.alice, "application/json", `{"reason":"no"}`, 200, nil)
		e.mustUpload(e.agentA, e.sesA, "three-1.0-py3-none-any.whl", w3)
	})
	t.Run("bytes", func(t *testing.T) {
		if len(w1) != len(w2) {
			t.Fatalf("the wheels differ in size (%d, %d): the quota below assumes they do not", len(w1), len(w2))
		}
		e := newEnv(t, func(o *broker.Options) { o.Quota.Bytes = int64(len(w1) + len(w2) - 1) })
		e.mustUpload(e.agentA, e.sesA, "one-1.0-py3-none-any.whl", w1)
		before := e.snapshot()
		code, b := e.upload(e.agentA, e.sesA, "two-1.0-py3-none-any.whl", w2)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "quota") {
			t.Errorf("upload past the byte quota: %d %s, want 413", code, b)
		}
		e.unchanged("an upload over the byte quota", before)
		// Room is counted as the bytes arrive, before they are known to be a wheel the
		// session holds already: at the quota, the same wheel again is refused too.
		if code, b := e.upload(e.agentA, e.sesA, "one-1.0-py3-none-any.whl", w1); code != http.StatusRequestEntityTooLarge {
			t.Errorf("the same wheel at the byte quota: %d %s, want 413", code, b)
		}
	})
}

func TestUploadDeleted(t *testing.T) {
	fc := &forgetful{}
	e := newEnv(t, func(o *broker.Options) { o.Classifier = fc; o.GC = fakeLayers{} })
	ctx := context.Background()
	up := func(name string) string { return wheelBytes(t, strings.Split(name, "-")[0], "1.0", nil) }
	has := func(f string) bool { return slices.Contains(e.uploads(), f) }

	// Rejected by policy: 201 rejected, and the wheel is gone before the answer.
	rej := "deny_me-1.0-py3-none-any.whl"
	if r := e.mustUpload(e.agentA, e.sesA, rej, up(rej)); r.State != broker.StateRejected {
		t.Fatalf("upload = %+v, want rejected", r)
	}
	if got := e.uploads(); len(got) != 0 {
		t.Errorf("a rejected upload left %v", got)
	}
	// The classifier fails: 500, nothing left.
	boom := "boom-1.0-py3-none-any.whl"
	if code, b := e.upload(e.agentA, e.sesA, boom, up(boom)); code != 500 {
		t.Errorf("failing classifier: %d %s", code, b)
	}
	if got := e.uploads(); len(got) != 0 {
		t.Errorf("a failed classification left %v", got)
	}

	// Denied: gone, and the classifier forgets it.
	den := "denied-1.0-py3-none-any.whl"
	r := e.mustUpload(e.agentA, e.sesA, den, up(den))
	if !has(e.stored(e.sesA, den, up(den))) {
		t.Fatalf("pending upload not stored: %v", e.uploads())
	}
	e.mustDo("POST", "/v1/requests/"+r.ID+"/deny", e.alice, "application/json", `{"reason":"no"}`, 200, nil)
	if has(e.stored(e.sesA, den, up(den))) {
		t.Errorf("a denied upload is still stored")
	}

	// The same wheel in two sessions: denying one keeps the other's, and the classifier
	// forgets the wheel only when the last copy goes.
	both := "both-1.0-py3-none-any.whl"
	ra := e.mustUpload(e.agentA, e.sesA, both, up(both))
	e.mustUpload(e.agentB, e.sesB, both, up(both))
	e.mustDo("POST", "/v1/requests/"+ra.ID+"/deny", e.alice, "application/json", `{"reason":"no"}`, 200, nil)
	if has(e.stored(e.sesA, both, up(both))) || !has(e.stored(e.sesB, both, up(both))) {
		t.Errorf("after denying alice's copy: %v", e.uploads())
	}
	// The same wheel twice in one session: denying one request keeps the file for the other.
	twice := "twice-1.0-py3-none-any.whl"
	t1 := e.mustUpload(e.agentA, e.sesA, twice, up(twice))
	e.mustUpload(e.agentA, e.sesA, twice, up(twice))
	e.mustDo("POST", "/v1/requests/"+t1.ID+"/deny", e.alice, "application/json", `{"reason":"no"}`, 200, nil)
	if !has(e.stored(e.sesA, twice, up(twice))) {
		t.Errorf("denying one of two requests deleted the wheel the other holds")
	}
	want := []string{sha(up(rej))[:8] + "/" + rej, sha(up(boom))[:8] + "/" + boom, sha(up(den))[:8] + "/" + den}
	if got := fc.forgotten(); !slices.Equal(got, want) {
		t.Errorf("forgotten %v, want %v", got, want)
	}

	// Garbage collection: a failed build's upload, a bound one whose binding is gone and an
	// unfinished upload's temporary file go; a pending one and a bound one stay.
	// (Every upload's answer sweeps its session too: the states change after the uploads.)
	type gcCase struct {
		name  string
		state broker.State
		bind  bool
		r     broker.Request
	}
	cases := []*gcCase{{name: "failed", state: broker.StateFailed}, {name: "unbound", state: broker.StateBound},
		{name: "bound", state: broker.StateBound, bind: true}, {name: "pending", state: broker.StatePending}}
	for _, c := range cases {
		c.r = e.mustUpload(e.agentB, e.sesB, c.name+"-1.0-py3-none-any.whl", up(c.name))
	}
	for _, c := range cases {
		if err := e.store.UpdateRequest(ctx, c.r.ID, func(q *broker.Request) error { q.State = c.state; return nil }); err != nil {
			t.Fatal(err)
		}
		if c.bind {
			if err := e.store.AddBinding(ctx, broker.Binding{SessionID: e.sesB, Kind: broker.KindExt, Digest: "sha256:" + sha(c.name),
				Ref: "r@sha256:" + sha(c.name), RequestID: c.r.ID, Created: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	file := func(name string) string { return e.stored(e.sesB, name+"-1.0-py3-none-any.whl", up(name)) }
	failed, unbound, bound, pending := file("failed"), file("unbound"), file("bound"), file("pending")
	stale := filepath.Join(e.dataDir, "uploads", ".incoming", "upload-123")
	if err := os.WriteFile(stale, []byte("half a wheel"), 0o600); err != nil {
		t.Fatal(err)
	}
	var rep broker.GCReport
	e.mustDo("POST", "/v1/gc", e.admin, "", "", 200, &rep)
	slices.Sort(rep.RemovedUploads)
	if !slices.Equal(rep.RemovedUploads, []string{"failed-1.0-py3-none-any.whl", "unbound-1.0-py3-none-any.whl"}) || rep.FreedBytes <= 9 {
		t.Errorf("gc report %+v", rep)
	}
	for f, want := range map[string]bool{failed: false, unbound: false, bound: true, pending: true, e.stored(e.sesB, both, up(both)): true} {
		if has(f) != want {
			t.Errorf("after gc, %s stored: %v, want %v", f, !want, want)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("gc left the unfinished upload: %v", err)
	}
}
