package cache

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// withBoot makes caches opened in the test see the machine's boot as id ("": unknown).
func withBoot(t *testing.T, id string) {
	t.Helper()
	old := bootID
	bootID = func() string { return id }
	t.Cleanup(func() { bootID = old })
}

// TestUnsyncedRecovery: a cache opened in a later boot removes what installs of the
// earlier one placed without a syncfs before anything is read (trees, layers, and the
// layers linking into those trees); what a syncfs covered (the records it retired)
// stays, and a removed layer is installed again from the registry.
func TestUnsyncedRecovery(t *testing.T) {
	ctx := context.Background()
	withBoot(t, "boot-a")
	c := openCache(t, WithParallelism(2))
	s := newStore()
	other := wheel{"d-1.0-py3-none-any.whl", map[string]string{"site-packages/d.py": "D = 4\n"}}
	third := wheel{"e-1.0-py3-none-any.whl", map[string]string{"site-packages/e.py": "E = 5\n"}}
	synced := s.add(artifact(t, "k0", third))
	fx1 := s.add(artifact(t, "k1", wheelA, wheelB))
	fx2 := s.add(artifact(t, "k2", wheelB, other)) // links into fx1's tree of wheelB
	fx3 := s.add(artifact(t, "k3", third, other))  // into synced's tree and fx2's
	_, err := c.Install(ctx, synced.md, synced.manifest, s.fetch, nil)
	must(t, err)
	must(t, c.retireUnsynced(ctx, 0)) // synced: its record is retired
	if n := names(t, c.unsyncedDir()); len(n) != 0 {
		t.Fatalf("after a retiring syncfs unsynced/ holds %v", n)
	}
	for _, fx := range []fixture{fx1, fx2, fx3} {
		_, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
		must(t, err)
	}
	if n := names(t, c.unsyncedDir()); len(n) != 3 {
		t.Fatalf("unsynced/ holds %v, want a record of each install", n)
	}

	// The same boot: nothing is removed, whoever opens the cache.
	c2, err := Open(c.Root())
	must(t, err)
	for _, fx := range []fixture{synced, fx1, fx2, fx3} {
		if _, ok := c2.Layer(fx.md); !ok {
			t.Errorf("layer %s gone in the boot that installed it", fx.md)
		}
	}

	// A later boot: fx1, fx2 and fx3 go, synced and its tree stay.
	withBoot(t, "boot-b")
	c3, err := Open(c.Root())
	must(t, err)
	for _, tc := range []struct {
		fx   fixture
		want bool
	}{{synced, true}, {fx1, false}, {fx2, false}, {fx3, false}} {
		fx, want := tc.fx, tc.want
		if _, ok := c3.Layer(fx.md); ok != want {
			t.Errorf("after a crash of the machine, layer %s present = %v, want %v", fx.md, ok, want)
		}
	}
	if ok, err := c3.hasTree(synced.layers[0].Digest.Encoded()); err != nil || !ok {
		t.Errorf("the tree of the synced layer is gone (%v)", err)
	}
	if n := names(t, c3.unsyncedDir()); len(n) != 0 {
		t.Errorf("after recovery unsynced/ holds %v", n)
	}
	assertConsistent(t, c3)
	// Pulled again, in the new boot, from the registry.
	_, err = c3.Install(ctx, fx2.md, fx2.manifest, s.fetch, nil)
	must(t, err)
	assertConsistent(t, c3)
}

// TestUnsyncedRetire: an install retires this boot's records old enough that their
// bytes are on disk, with a syncfs before it writes; younger ones stay. GC and doctor
// retire every one.
func TestUnsyncedRetire(t *testing.T) {
	ctx := context.Background()
	withBoot(t, "boot-a")
	c := openCache(t, WithParallelism(2))
	s := newStore()
	fx1 := s.add(artifact(t, "k1", wheelA))
	fx2 := s.add(artifact(t, "k2", wheelB))
	fx3 := s.add(artifact(t, "k3", wheelC))
	_, err := c.Install(ctx, fx1.md, fx1.manifest, s.fetch, nil)
	must(t, err)
	old := names(t, c.unsyncedDir())
	if len(old) != 1 {
		t.Fatalf("unsynced/ holds %v", old)
	}
	then := time.Now().Add(-2 * unsyncedAge)
	must(t, os.Chtimes(filepath.Join(c.unsyncedDir(), old[0]), then, then))
	_, err = c.Install(ctx, fx2.md, fx2.manifest, s.fetch, nil)
	must(t, err)
	now := names(t, c.unsyncedDir())
	if len(now) != 1 || now[0] == old[0] {
		t.Fatalf("after another install unsynced/ holds %v, want only its own record (the old one %s retired)", now, old[0])
	}
	_, err = c.Install(ctx, fx3.md, fx3.manifest, s.fetch, nil)
	must(t, err)
	if n := names(t, c.unsyncedDir()); len(n) != 2 {
		t.Fatalf("a young record was retired: unsynced/ holds %v", n)
	}
	_, err = c.Doctor(ctx, false)
	must(t, err)
	if n := names(t, c.unsyncedDir()); len(n) != 0 {
		t.Errorf("after doctor unsynced/ holds %v", n)
	}
}

// TestUnsyncedUnknownBoot: a process that cannot tell the boot takes every record as an
// earlier boot's: what they name is removed, not trusted.
func TestUnsyncedUnknownBoot(t *testing.T) {
	ctx := context.Background()
	withBoot(t, "boot-a")
	c := openCache(t, WithParallelism(2))
	s := newStore()
	fx := s.add(artifact(t, "k1", wheelA))
	_, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
	must(t, err)
	withBoot(t, "")
	c2, err := Open(c.Root())
	must(t, err)
	if _, ok := c2.Layer(fx.md); ok {
		t.Errorf("a layer placed unsynced survived an Open that cannot tell the boot")
	}
	if n := names(t, c2.unsyncedDir()); len(n) != 0 {
		t.Errorf("unsynced/ holds %v", n)
	}
}
