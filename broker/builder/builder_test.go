package builder

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/sqlite"
	"github.com/pylayer/pylayer/catalog"
	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry"
	"github.com/pylayer/pylayer/test/fixture"
)

type env struct {
	w      *Worker
	store  broker.Store
	idx    *index.Client
	idxDir string // the files the index serves
	repo   registry.Repo
}

// setup serves wheels from a real in-process index, publishes to an OCI layout and keeps
// state in a real SQLite store; the base pins foo 1.0.
func setup(t *testing.T, cat *catalog.Catalog) (*env, broker.Session) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	idxDir := filepath.Join(dir, "index")
	os.MkdirAll(idxDir, 0o755)
	for _, w := range []fixture.Wheel{
		{Name: "foo", Version: "1.0"}, {Name: "foo", Version: "2.0"},
		{Name: "bar", Version: "1.0", RequiresDist: []string{"foo"}},
		{Name: "needs-foo2", Version: "1.0", RequiresDist: []string{"foo>=2"}},
		needyWheel(t), // needs a shared library it does not vendor (native_test.go)
	} {
		if _, err := w.Write(idxDir); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := index.NewServer(idxDir)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	idx, err := index.New(hs.URL+"/simple/", index.WithNetrc(""))
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ref, err := registry.ParseRef("oci:" + filepath.Join(dir, "repo"))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := registry.Open(ctx, ref, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	priv, _, err := sign.GenerateKeyPair([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, "cosign.key")
	os.WriteFile(keyPath, priv, 0o600)
	signer, err := sign.LoadSigner(ctx, keyPath, func() ([]byte, error) { return []byte("pw"), nil })
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{Store: store, Catalog: cat, Index: idx, Repo: repo, Signer: signer,
		Trees: &build.Builder{Root: filepath.Join(dir, "build"), Fetcher: idx}})
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := target.FromFlags("3.11", "manylinux_2_28_x86_64")
	files, err := idx.Files(ctx, "foo")
	if err != nil {
		t.Fatal(err)
	}
	var foo1 index.File
	for _, f := range files {
		if f.Filename == "foo-1.0-py3-none-any.whl" {
			foo1 = f
		}
	}
	base := &lock.Lock{Version: lock.FormatVersion, Kind: lock.KindBase, Target: tg, Requirements: []string{"foo"},
		Packages: []lock.Package{{Name: "foo", Version: "1.0", Filename: foo1.Filename, URL: foo1.URL, SHA256: foo1.SHA256, Size: foo1.Size, RequiredBy: []string{lock.Requested}}}}
	bl, err := base.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	s := broker.Session{ID: "ses_a", Owner: "alice", Created: time.Now().UTC(), BaseLock: bl}
	if err := store.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	return &env{w: w, store: store, idx: idx, idxDir: idxDir, repo: repo}, s
}

func (e *env) request(t *testing.T, s broker.Session, id string, specs ...string) broker.Request {
	t.Helper()
	r, err := e.w.Classify(context.Background(), s, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	r.ID, r.SessionID, r.Specs, r.Created, r.Updated = id, s.ID, specs, now, now
	if err := e.store.CreateRequest(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// settle waits until r's wheels are in the wheelhouse and the prefetch its classification
// started of them has ended (Wheel waits for one under way), so that a test may change
// the index or the worker's configuration with nothing still reading them.
func (e *env) settle(t *testing.T, r broker.Request) {
	t.Helper()
	for _, p := range r.Packages {
		lp := lock.Package{Name: p.Name, Version: p.Version, Filename: p.Filename, SHA256: p.SHA256, Size: p.Size}
		if _, err := e.w.cfg.Trees.Wheel(context.Background(), lp); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) waitTerminal(t *testing.T, id string) broker.Request {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		r, err := e.store.GetRequest(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if broker.Terminal(r.State) {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("request %s never finished", id)
	return broker.Request{}
}

func TestClassifyAndBuild(t *testing.T) {
	cat := &catalog.Catalog{Allow: []catalog.Rule{{Name: "bar"}, {Name: "foo"}, {Name: "needs-foo2"}}}
	e, s := setup(t, cat)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.w.Run(ctx, 2) }()
	defer wg.Wait()
	defer cancel()

	// Two identical requests: one build, both bound to the same digest.
	a := e.request(t, s, "req_a", "bar")
	b := e.request(t, s, "req_b", "bar")
	if a.State != broker.StateApproved || a.Decision != string(catalog.AutoApproved) {
		t.Fatalf("bar should be auto-approved: %+v", a)
	}
	e.w.Enqueue(ctx, a.ID)
	ra, rb := e.waitTerminal(t, a.ID), e.waitTerminal(t, b.ID)
	if ra.State != broker.StateBound || rb.State != broker.StateBound || ra.Digest != rb.Digest || ra.Digest == "" {
		t.Fatalf("want both bound to one layer: %+v %+v", ra, rb)
	}
	if got := e.w.Builds(); got != 1 {
		t.Fatalf("identical requests built %d times, want 1", got)
	}
	// The ext lock is the delta: bar only (foo is the base's).
	if len(ra.Packages) != 1 || ra.Packages[0].Name != "bar" {
		t.Fatalf("delta: %+v", ra.Packages)
	}
	// A base override is pending, offered as isolated, and names the pin.
	o := e.request(t, s, "req_o", "needs-foo2")
	if o.State != broker.StatePending || !o.Isolated {
		t.Fatalf("base override: %+v", o)
	}
	found := false
	for _, r := range o.Reasons {
		if strings.Contains(r, "base layer pins foo==1.0") {
			found = true
		}
	}
	if !found {
		t.Fatalf("reasons do not name the base pin: %v", o.Reasons)
	}
	// Approved as isolated, it builds an iso layer holding foo 2.0.
	if err := e.store.UpdateRequest(ctx, o.ID, func(r *broker.Request) error {
		r.State, r.Decision = broker.StateApproved, broker.DecisionApprovedIsolated
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.w.Enqueue(ctx, o.ID)
	ro := e.waitTerminal(t, o.ID)
	if ro.State != broker.StateBound {
		t.Fatalf("isolated build: %+v", ro)
	}
	bs, _ := e.store.Bindings(ctx, s.ID)
	kinds := map[lock.Kind]int{}
	for _, b := range bs {
		kinds[b.Kind]++
	}
	if kinds[broker.KindIso] != 1 || kinds[broker.KindExt] != 2 {
		t.Fatalf("bindings: %+v", bs)
	}
}

func TestResumeAfterCrash(t *testing.T) {
	e, s := setup(t, &catalog.Catalog{Allow: []catalog.Rule{{Name: "bar"}, {Name: "foo"}}})
	r := e.request(t, s, "req_c", "bar")
	// A worker claimed it and died: its lease runs out.
	if _, ok, err := e.store.ClaimBuild(context.Background(), broker.Lease{Holder: "dead", TTL: time.Millisecond}); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if got, _ := e.store.GetRequest(context.Background(), r.ID); got.State != broker.StateBuilding {
		t.Fatalf("state %s", got.State)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.w.Run(ctx, 1) }()
	got := e.waitTerminal(t, r.ID)
	cancel()
	<-done
	if got.State != broker.StateBound {
		t.Fatalf("resumed request: %+v", got)
	}
	l, _ := e.store.AuditLog(context.Background(), s.ID)
	var resumed bool
	for _, ev := range l {
		resumed = resumed || ev.Action == "resume" && strings.Contains(ev.Detail, "dead")
	}
	if !resumed {
		t.Errorf("no resume event naming the dead holder in %+v", l)
	}
}

func TestFailedBuildBindsNothing(t *testing.T) {
	e, s := setup(t, &catalog.Catalog{Allow: []catalog.Rule{{Name: "bar"}, {Name: "foo"}}})
	r := e.request(t, s, "req_f", "bar")
	// The wheel disappears from the wheelhouse and the index before the build, once the
	// classification's prefetch of it has ended (Wheel waits for one under way), so that
	// nothing fetches it back.
	e.settle(t, r)
	for _, p := range r.Packages {
		if err := os.Remove(filepath.Join(e.idxDir, p.Filename)); err != nil {
			t.Fatal(err)
		}
	}
	os.RemoveAll(filepath.Join(e.w.cfg.Trees.Root, "wheels"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.w.Run(ctx, 1) }()
	got := e.waitTerminal(t, r.ID)
	cancel()
	<-done
	if got.State != broker.StateFailed || got.Error == "" {
		t.Fatalf("want failed with a reason: %+v", got)
	}
	if bs, _ := e.store.Bindings(context.Background(), s.ID); len(bs) != 0 {
		t.Fatalf("a failed build bound %+v", bs)
	}
}
