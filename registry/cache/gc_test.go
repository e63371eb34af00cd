package cache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
)

// installAll installs fixtures and returns them; tree sizes are the file bytes.
func installAll(t *testing.T, c *Cache, s *store, fxs ...fixture) {
	t.Helper()
	for _, fx := range fxs {
		s.add(fx)
		_, err := c.Install(context.Background(), fx.md, fx.manifest, s.fetch, nil)
		must(t, err)
	}
}

// fetchedBy installs fxs and returns how many blobs that fetched (configs included).
func fetchedBy(t *testing.T, c *Cache, s *store, fxs ...fixture) int {
	t.Helper()
	before := s.total()
	installAll(t, c, s, fxs...)
	return s.total() - before
}

// setUsed backdates a layer's last use.
func setUsed(t *testing.T, c *Cache, d digest.Digest, ago time.Duration) {
	t.Helper()
	at := time.Now().Add(-ago)
	must(t, os.Chtimes(c.lockPath("hold", d.Encoded()), at, at))
}

func sizeOf(w wheel) int64 {
	var n int64
	for _, content := range w.files {
		n += int64(len(content))
	}
	return n
}

func TestGC(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	wd := wheel{"d-1.0-py3-none-any.whl", map[string]string{"site-packages/d.py": strings.Repeat("d", 1000)}}
	we := wheel{"e-1.0-py3-none-any.whl", map[string]string{"site-packages/e.py": strings.Repeat("e", 2000)}}
	A := artifact(t, "A", wheelA, wheelB) // ref
	B := artifact(t, "B", wheelB, wheelC) // keep
	C := artifact(t, "C", wheelC)         // held
	D := artifact(t, "D", wd)             // unreferenced, oldest
	E := artifact(t, "E", we)             // unreferenced, newer
	installAll(t, c, s, A, B, C, D, E)
	must(t, c.SetRef(ctx, "registry.example/team/pylayer:base-current", A.md))
	release, err := c.Hold(ctx, C.md)
	must(t, err)
	defer release()
	setUsed(t, c, D.md, 2*time.Hour)
	setUsed(t, c, E.md, time.Hour)

	entries, err := c.List(ctx)
	must(t, err)
	byDigest := map[digest.Digest]Entry{}
	for _, e := range entries {
		byDigest[e.Digest] = e
	}
	if e := byDigest[A.md]; len(e.Refs) != 1 || e.Bytes != sizeOf(wheelA)+sizeOf(wheelB) ||
		!slices.Equal(e.Packages, []string{wheelA.title, wheelB.title}) || len(e.Trees) != 2 || e.Held {
		t.Errorf("List A = %+v", e)
	}
	if e := byDigest[C.md]; !e.Held || len(e.Refs) != 0 {
		t.Errorf("List C = %+v", e)
	}
	if len(entries) != 5 {
		t.Fatalf("List: %d entries, want 5", len(entries))
	}

	// A budget the cache already meets removes nothing.
	rep, err := c.GC(ctx, 1<<30, []digest.Digest{B.md})
	must(t, err)
	if len(rep.RemovedLayers) != 0 || len(rep.RemovedTrees) != 0 || len(rep.Kept) != 5 {
		t.Errorf("GC(1 GiB) = %+v", rep)
	}

	// A budget one layer over: the oldest-used unprotected layer (D) goes.
	total := sizeOf(wheelA) + sizeOf(wheelB) + sizeOf(wheelC) + sizeOf(wd) + sizeOf(we)
	rep, err = c.GC(ctx, total-1, []digest.Digest{B.md})
	must(t, err)
	if !slices.Equal(rep.RemovedLayers, []digest.Digest{D.md}) || len(rep.RemovedTrees) != 1 || rep.FreedBytes != sizeOf(wd) {
		t.Errorf("GC(total-1) = %+v, want D and its tree removed", rep)
	}

	// maxBytes 0: everything unprotected goes, never the ref'd, kept or held.
	rep, err = c.GC(ctx, 0, []digest.Digest{B.md})
	must(t, err)
	if !slices.Equal(rep.RemovedLayers, []digest.Digest{E.md}) || rep.FreedBytes != sizeOf(we) {
		t.Errorf("GC(0) = %+v, want only E removed", rep)
	}
	for _, fx := range []fixture{A, B, C} {
		if _, ok := c.Layer(fx.md); !ok {
			t.Errorf("layer %s removed", fx.md)
		}
	}
	assertConsistent(t, c)

	// Released and not kept: C goes, but its tree stays (B uses it).
	release()
	rep, err = c.GC(ctx, -1, nil)
	must(t, err)
	slices.Sort(rep.RemovedLayers)
	want := []digest.Digest{B.md, C.md}
	slices.Sort(want)
	if !slices.Equal(rep.RemovedLayers, want) || len(rep.RemovedTrees) != 1 || rep.FreedBytes != sizeOf(wheelC) {
		t.Errorf("GC(-1) = %+v, want B and C removed, and the tree of c only", rep)
	}
	if !slices.Equal(rep.Kept, []digest.Digest{A.md}) {
		t.Errorf("kept %v, want A", rep.Kept)
	}
	assertConsistent(t, c)

	// Without the ref, A goes too, and nothing is left.
	must(t, c.DeleteRef(ctx, "registry.example/team/pylayer:base-current"))
	_, err = c.GC(ctx, -1, nil)
	must(t, err)
	for _, d := range []string{"trees/sha256", "layers/sha256", "tmp"} {
		if n := names(t, filepath.Join(c.Root(), d)); len(n) != 0 {
			t.Errorf("%s = %v, want empty", d, n)
		}
	}
	// The locks of what was removed are gone too, save the gc lock.
	if n := names(t, filepath.Join(c.Root(), "locks")); !slices.Equal(n, []string{"gc"}) {
		t.Errorf("locks = %v, want only gc", n)
	}
	// A reinstall works after GC removed its locks.
	installAll(t, c, s, A)
	assertConsistent(t, c)
}

func TestHoldBeforeInstall(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	fx := artifact(t, "k", wheelC)
	release, err := c.Hold(ctx, fx.md)
	must(t, err)
	installAll(t, c, s, fx)
	rep, err := c.GC(ctx, 0, nil)
	must(t, err)
	if len(rep.RemovedLayers) != 0 {
		t.Errorf("GC removed a layer held before it was installed: %+v", rep)
	}
	release()
	release() // idempotent
	if _, err := c.Hold(ctx, "sha256:nothex"); err == nil {
		t.Error("Hold accepted an invalid digest")
	}
}

func TestRefs(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	d1, d2 := digest.FromString("1"), digest.FromString("2")
	names := []string{"current", "base-0123", "127.0.0.1:5000/team/pylayer:current", ".hidden", "..", "a%2Fb", "ü"}
	for _, n := range names {
		must(t, c.SetRef(ctx, n, d1))
		must(t, c.SetRef(ctx, n, d2)) // replaces
		got, err := c.Ref(ctx, n)
		if err != nil || got != d2 {
			t.Errorf("Ref(%q) = %v, %v", n, got, err)
		}
	}
	all, err := c.Refs(ctx)
	must(t, err)
	if len(all) != len(names) {
		t.Errorf("Refs = %v", all)
	}
	for _, n := range names {
		if all[n] != d2 {
			t.Errorf("Refs[%q] = %v", n, all[n])
		}
	}
	must(t, c.DeleteRef(ctx, "current"))
	must(t, c.DeleteRef(ctx, "current"))
	if _, err := c.Ref(ctx, "current"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Ref after delete: %v", err)
	}
	for _, bad := range []string{"", "a\nb", "\xff", strings.Repeat("/", 100)} {
		if err := c.SetRef(ctx, bad, d1); !errors.Is(err, ErrInvalidRef) {
			t.Errorf("SetRef(%q) = %v, want ErrInvalidRef", bad, err)
		}
	}
	if err := c.SetRef(ctx, "x", "sha256:short"); err == nil {
		t.Error("SetRef accepted an invalid digest")
	}
	// A stray file in refs/ is reported, not silently ignored.
	must(t, os.WriteFile(filepath.Join(c.Root(), "refs", "%zz"), []byte(d1), 0o644))
	if _, err := c.Refs(ctx); !errors.Is(err, ErrInvalidCache) {
		t.Errorf("Refs with a stray file: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(c.Root(), "refs", "%zz"), []byte(d1), 0o644))
}

func TestOpen(t *testing.T) {
	base := t.TempDir()
	// A cache directory that is a file, or whose parts are not directories.
	must(t, os.WriteFile(filepath.Join(base, "file"), nil, 0o644))
	if _, err := Open(filepath.Join(base, "file")); !errors.Is(err, ErrInvalidCache) {
		t.Errorf("Open(file) = %v, want ErrInvalidCache", err)
	}
	bad := filepath.Join(base, "bad")
	must(t, os.MkdirAll(bad, 0o755))
	must(t, os.WriteFile(filepath.Join(bad, "layers"), nil, 0o644))
	if _, err := Open(bad); !errors.Is(err, ErrInvalidCache) {
		t.Errorf("Open with layers a file = %v, want ErrInvalidCache", err)
	}
	sym := filepath.Join(base, "sym")
	must(t, os.MkdirAll(sym, 0o755))
	must(t, os.Symlink(t.TempDir(), filepath.Join(sym, "tmp")))
	if _, err := Open(sym); !errors.Is(err, ErrInvalidCache) {
		t.Errorf("Open with tmp a symlink = %v, want ErrInvalidCache", err)
	}
	if _, err := Open(""); !errors.Is(err, ErrInvalidCache) {
		t.Errorf("Open(\"\") = %v", err)
	}
	if _, err := Open(base, WithParallelism(0)); err == nil {
		t.Error("WithParallelism(0) accepted")
	}

	// Stale work directories: removed once old and unlocked, kept while locked or young.
	root := filepath.Join(base, "cache")
	c, err := Open(root)
	must(t, err)
	hex := digest.FromString("x").Encoded()
	old := time.Now().Add(-2 * time.Hour)
	mk := func(name string, age time.Time) {
		p := filepath.Join(c.tmpDir(), name)
		must(t, os.MkdirAll(filepath.Join(p, "sub"), 0o755))
		must(t, os.Chmod(filepath.Join(p, "sub"), 0o555))
		must(t, os.Chtimes(p, age, age))
	}
	mk("tree-"+hex+"-1", old)
	mk("layer-"+hex+"-2", old)
	mk("gc-3", old)
	mk("tree-"+hex+"-young", time.Now())
	l, err := acquire(context.Background(), c.lockPath("layer", hex), lockMode{exclusive: true, create: true})
	must(t, err)
	_, err = Open(root)
	must(t, err)
	if got := names(t, c.tmpDir()); !slices.Equal(got, []string{"layer-" + hex + "-2", "tree-" + hex + "-young"}) {
		t.Errorf("tmp after Open = %v, want the locked and the young entry", got)
	}
	l.release()
}
