package cache

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nlinks maps every regular file below root to its link count.
func nlinks(t *testing.T, root string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	must(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = fi.Sys().(*syscall.Stat_t).Nlink
		return nil
	}))
	return out
}

// TestInstallWritesEachFileOnce: a layer whose blobs are new to the host is made of
// its trees, renamed in whole: every file has one name, and each tree's home is the
// layer. A second layer that shares a blob links its files from there.
func TestInstallWritesEachFileOnce(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	fx := s.add(artifact(t, "k1", wheelA, wheelB))
	root, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
	must(t, err)
	links := nlinks(t, root)
	if len(links) != len(wheelA.files)+len(wheelB.files)+2 { // + .pylayer/manifest.json and lock.json
		t.Errorf("%d files in the layer, want %d: %v", len(links), len(wheelA.files)+len(wheelB.files)+2, links)
	}
	for p, n := range links {
		if n != 1 {
			t.Errorf("%s has %d names, want 1: a new layer writes each file once", p, n)
		}
	}
	for _, l := range fx.layers {
		hex := l.Digest.Encoded()
		target, err := os.Readlink(c.treeDir(hex))
		if err != nil || target != homeTarget(fx.md.Encoded()) {
			t.Errorf("tree %s: link %q, %v; want its home %q", titleOf(l), target, err, homeTarget(fx.md.Encoded()))
		}
		if ok, err := c.hasTree(hex); !ok || err != nil {
			t.Errorf("hasTree(%s) = %v, %v", titleOf(l), ok, err)
		}
	}
	if left := names(t, c.tmpDir()); len(left) != 0 {
		t.Errorf("tmp/ after install: %v", left)
	}
	assertConsistent(t, c)

	// b, shared: linked from its home, not fetched; c, new: its home is the second layer.
	before := s.total()
	other := s.add(artifact(t, "k2", wheelB, wheelC))
	root2, err := c.Install(ctx, other.md, other.manifest, s.fetch, nil)
	must(t, err)
	if fetched := s.total() - before; fetched != 2 { // the config and c
		t.Errorf("second install fetched %d blobs, want 2", fetched)
	}
	for p, n := range nlinks(t, root2) {
		want := uint64(1)
		if strings.HasPrefix(p, "site-packages/b") {
			want = 2
		}
		if n != want {
			t.Errorf("second layer: %s has %d names, want %d", p, n, want)
		}
	}
	if h, _ := c.home(other.layers[1].Digest.Encoded()); h != other.md.Encoded() {
		t.Errorf("home of c = %s, want the second layer", h)
	}
	assertConsistent(t, c)
}

// TestGCMovesHomes: removing a layer that is the home of a tree another layer uses
// moves the home there; the files stay where they are, and the tree goes with the
// last layer that uses it.
func TestGCMovesHomes(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	first := artifact(t, "first", wheelA, wheelB)
	second := artifact(t, "second", wheelB)
	installAll(t, c, s, first, second)
	b := first.layers[1].Digest.Encoded()
	if h, _ := c.home(b); h != first.md.Encoded() {
		t.Fatalf("home of b = %s, want the first layer", h)
	}
	must(t, c.SetRef(ctx, "keep", second.md))
	rep, err := c.GC(ctx, -1, nil)
	must(t, err)
	if len(rep.RemovedLayers) != 1 || rep.RemovedLayers[0] != first.md || len(rep.RemovedTrees) != 1 {
		t.Fatalf("GC = %+v, want the first layer and tree a removed", rep)
	}
	if h, err := c.home(b); err != nil || h != second.md.Encoded() {
		t.Errorf("home of b after GC = %q, %v; want the second layer", h, err)
	}
	assertConsistent(t, c)
	root2, _ := c.Layer(second.md)
	for p, n := range nlinks(t, root2) {
		if n != 1 {
			t.Errorf("%s has %d names after its other layer went, want 1", p, n)
		}
	}
	// The first layer comes back by fetching a alone; b is linked from its new home.
	if fetched := fetchedBy(t, c, s, first); fetched != 2 {
		t.Errorf("reinstall fetched %d blobs, want 2 (config, a)", fetched)
	}
	assertConsistent(t, c)

	must(t, c.DeleteRef(ctx, "keep"))
	if _, err := c.GC(ctx, -1, nil); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, c)
}

// TestDanglingHome: an install that dies after placing its trees' homes but before
// renaming its layer into place leaves homes that name no layer. They are no trees:
// the next install of a blob replaces its home, Doctor does not call them damage, and
// GC removes them.
func TestDanglingHome(t *testing.T) {
	ctx := context.Background()
	for _, next := range []string{"install", "gc"} {
		t.Run(next, func(t *testing.T) {
			c := openCache(t)
			s := newStore()
			fx := s.add(artifact(t, "k", wheelA, wheelB))
			_, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
			must(t, err)
			// What a kill between the homes and the layer's rename leaves (TestKillAnywhere
			// hits it at random): the file lists and the homes, and no layer.
			must(t, forceRemoveAll(c.layerDir(fx.md.Encoded())))
			for _, l := range fx.layers {
				if !c.danglingHome(l.Digest.Encoded()) {
					t.Fatalf("tree %s: not a dangling home after the crash", titleOf(l))
				}
				if ok, err := c.hasTree(l.Digest.Encoded()); ok || err != nil {
					t.Errorf("hasTree of a dangling home = %v, %v; want false, nil", ok, err)
				}
			}
			assertConsistent(t, c)
			switch next {
			case "install":
				before := s.total()
				root, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
				must(t, err)
				if fetched := s.total() - before; fetched != 3 {
					t.Errorf("install after the crash fetched %d blobs, want 3", fetched)
				}
				for _, l := range fx.layers {
					if h, _ := c.home(l.Digest.Encoded()); c.layerDir(h) != root {
						t.Errorf("home of %s = %s, want the layer", titleOf(l), h)
					}
				}
				assertConsistent(t, c)
			case "gc":
				rep, err := c.GC(ctx, -1, nil)
				must(t, err)
				if len(rep.RemovedTrees) != 2 {
					t.Errorf("GC = %+v, want both homes removed", rep)
				}
				assertNothingLeft(t, c)
			}
		})
	}
}

// TestDoctorRehomes: a home removed by hand while another layer uses the blob is
// damage that repair mends by making that layer the home, without fetching anything.
func TestDoctorRehomes(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	first := artifact(t, "first", wheelB)
	second := artifact(t, "second", wheelB, wheelC)
	installAll(t, c, s, first, second)
	must(t, forceRemoveAll(c.layerDir(first.md.Encoded()))) // b's home, by hand
	rep, err := c.Doctor(ctx, false)
	must(t, err)
	if len(rep.Bad) == 0 || !strings.Contains(strings.Join(rep.Bad, "\n"), "repair makes that layer its home") {
		t.Fatalf("Doctor = %+v, want the lost home reported", rep)
	}
	rep, err = c.Doctor(ctx, true)
	must(t, err)
	if len(rep.Bad) != 0 || len(rep.Repaired) != 1 {
		t.Fatalf("Doctor(repair) = %+v, want one repair", rep)
	}
	if h, _ := c.home(first.layers[0].Digest.Encoded()); h != second.md.Encoded() {
		t.Errorf("home of b = %s, want the second layer", h)
	}
	assertConsistent(t, c)
	if fetched := fetchedBy(t, c, s, first); fetched != 1 {
		t.Errorf("reinstall fetched %d blobs, want 1 (the config)", fetched)
	}
	assertConsistent(t, c)
}

// FuzzHome: whatever a tree's link says, home accepts exactly homeTarget of a digest
// (a link anywhere else is damage, never followed), and never panics.
func FuzzHome(f *testing.F) {
	for _, s := range []string{homeTarget(strings.Repeat("a", 64)), homeTarget(strings.Repeat("a", 63)),
		"../../layers/sha256/../../../etc", "/etc/passwd", homeTarget(strings.Repeat("A", 64)), "", "../../layers/sha256/"} {
		f.Add(s)
	}
	c := openCache(f)
	hex := strings.Repeat("0", 64)
	f.Fuzz(func(t *testing.T, target string) {
		os.Remove(c.treeDir(hex))
		if os.Symlink(target, c.treeDir(hex)) != nil {
			return // not a name the file system takes (empty, NUL, too long)
		}
		layer, err := c.home(hex)
		if err != nil {
			return
		}
		if !isHex64(layer) || homeTarget(layer) != target {
			t.Fatalf("home(%q) = %q, want an error or the layer of homeTarget", target, layer)
		}
	})
}
