package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

// TestBrokerPlainIndex: a plain PEP 503 index (a directory behind a web server: HTML links
// with #sha256= fragments, no sizes, no JSON, no metadata files) is what most private
// indexes are. pylayer lock fills in the sizes; the broker, resolving through the same
// code, auto-approves, builds and binds a request from it, to the very lock pylayer lock
// writes for it, and the session imports the package.
func TestBrokerPlainIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := &bkDeploy{idxDir: sharedDir(t), h: newHost(t)}
	d.repo = "oci:" + filepath.Join(d.h.home, "layout")
	d.priv, d.pub = d.h.keygen(ctx, t, "cosign")
	bkWrite(t, d.idxDir, fixture.Wheel{Name: "pin", Version: "1.0"}, fixture.Wheel{Name: "foo", Version: "1.0", RequiresDist: []string{"pin"}})
	plain := httptest.NewServer(fixture.PlainIndex(d.idxDir))
	t.Cleanup(plain.Close)
	d.proxy = &bkProxy{URL: plain.URL + "/simple/"}

	d.baseLock = filepath.Join(d.h.home, "base.lock.json")
	d.h.must(ctx, t, lockArgs(d.proxy.URL, d.baseLock, []string{"pin"})...)
	d.baseRef = d.publishBase(ctx, t, d.baseLock)
	extLock := filepath.Join(d.h.home, "foo.lock.json")
	var locked struct{ Key string }
	out := d.h.must(ctx, t, "lock", "foo", "--index-url", d.proxy.URL, "-c", d.baseLock, "--kind", "ext", "-o", extLock, "--json")
	if err := json.Unmarshal([]byte(out), &locked); err != nil || locked.Key == "" {
		t.Fatalf("pylayer lock --json printed %q: %v", out, err)
	}

	d.catalog = filepath.Join(d.h.home, "catalog.json")
	if err := os.WriteFile(d.catalog, []byte(`{"base": ["pin"], "allow": [{"name": "foo"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d.db = filepath.Join(d.h.home, "broker", "broker.db")
	if err := os.MkdirAll(filepath.Dir(d.db), 0o700); err != nil {
		t.Fatal(err)
	}
	d.owner = d.token(ctx, t, "owner", "alice")
	d.serve = d.start(t)
	se := d.serve.newSession(t, d.owner)
	r := d.serve.ask(t, se, "foo")
	if r.State != "approved" || r.Decision != "auto-approved" {
		t.Fatalf("request foo from a plain index: %s/%s (%s), want approved/auto-approved", r.State, r.Decision, r.reasons())
	}
	if r.LockKey != locked.Key {
		t.Errorf("the broker locked foo to key %s, pylayer lock to %s: one resolution should give one lock", r.LockKey, locked.Key)
	}
	r = d.serve.wait(t, se.Agent, r.ID)
	if r.State != "bound" || r.LockKey != locked.Key {
		t.Fatalf("request foo: %s, key %s (%s), want bound to key %s", r.State, r.LockKey, r.reasons(), locked.Key)
	}
	d.verify(ctx, t, r.Digest)
	wantVersions(t, "session on a plain index", d.versions(ctx, t, se.ID), map[string]string{"foo": "1.0", "pin": "1.0"})
}
