package cache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDoctor(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		tamper func(t *testing.T, c *Cache, root, tree string)
		tree   bool // the tree is damaged (and the layer with it)
	}{
		// The layer is the home of tree a (its files are a's, see homes.go), and links
		// tree b from the other layer, b's home.
		{"file content changed in the tree", func(t *testing.T, c *Cache, root, tree string) {
			p := filepath.Join(tree, "site-packages/a/__init__.py")
			must(t, os.Chmod(p, 0o644))
			must(t, os.WriteFile(p, []byte("import os; os.system('evil')\n"), 0o644))
			must(t, os.Chmod(p, 0o444))
		}, true},
		{"file made writable", func(t *testing.T, c *Cache, root, tree string) {
			must(t, os.Chmod(filepath.Join(tree, "site-packages/a/__init__.py"), 0o666))
		}, true},
		{"file added beside the tree's files in its home", func(t *testing.T, c *Cache, root, tree string) {
			d := filepath.Join(tree, "site-packages/a")
			must(t, os.Chmod(d, 0o755))
			must(t, os.WriteFile(filepath.Join(d, "extra.py"), nil, 0o444))
			must(t, os.Chmod(d, 0o555))
		}, false},
		{"linked file of the layer replaced by a copy", func(t *testing.T, c *Cache, root, tree string) {
			d := filepath.Join(root, "site-packages")
			must(t, os.Chmod(d, 0o755))
			must(t, os.Remove(filepath.Join(d, "b.py")))
			must(t, os.WriteFile(filepath.Join(d, "b.py"), []byte("B = 1\n"), 0o444))
			must(t, os.Chmod(d, 0o555))
		}, false},
		{"file added to the layer", func(t *testing.T, c *Cache, root, tree string) {
			must(t, os.Chmod(root, 0o755))
			must(t, os.WriteFile(filepath.Join(root, "sitecustomize.py"), nil, 0o444))
			must(t, os.Chmod(root, 0o555))
		}, false},
		{"lock replaced", func(t *testing.T, c *Cache, root, tree string) {
			d := filepath.Join(root, metaDir)
			must(t, os.Chmod(d, 0o755))
			must(t, os.Remove(filepath.Join(d, metaLock)))
			must(t, os.WriteFile(filepath.Join(d, metaLock), []byte("{}"), 0o444))
			must(t, os.Chmod(d, 0o555))
		}, false},
		{"file list removed", func(t *testing.T, c *Cache, root, tree string) {
			must(t, os.Remove(tree+filesSuffix))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := openCache(t)
			s := newStore()
			fx := artifact(t, "k", wheelA, wheelB)
			other := artifact(t, "other", wheelB) // b's home, must survive
			installAll(t, c, s, other, fx)
			root, _ := c.Layer(fx.md)
			var treeA string
			for _, l := range fx.layers {
				if titleOf(l) == wheelA.title {
					treeA = c.treeDir(l.Digest.Encoded())
					if h, err := c.home(l.Digest.Encoded()); err != nil || h != fx.md.Encoded() {
						t.Fatalf("home of tree a = %q, %v; want the layer that unpacked it", h, err)
					}
				}
			}
			assertConsistent(t, c)
			tt.tamper(t, c, root, treeA)

			rep, err := c.Doctor(ctx, false)
			must(t, err)
			wantBad := 1
			if tt.tree {
				wantBad = 2
			}
			if len(rep.Bad) != wantBad || rep.Checked != 4 || len(rep.Repaired) != 0 {
				t.Fatalf("Doctor = %+v, want %d bad of 4", rep, wantBad)
			}
			if !strings.Contains(strings.Join(rep.Bad, "\n"), "layer "+string(fx.md)) {
				t.Errorf("the layer is not reported: %q", rep.Bad)
			}
			if _, ok := c.Layer(fx.md); !ok {
				t.Error("Doctor without repair removed the layer")
			}

			rep, err = c.Doctor(ctx, true)
			must(t, err)
			if len(rep.Repaired) != wantBad {
				t.Errorf("repair = %+v", rep)
			}
			if _, ok := c.Layer(fx.md); ok {
				t.Error("the damaged layer is still installed")
			}
			if _, ok := c.Layer(other.md); !ok {
				t.Error("repair removed a healthy layer")
			}
			assertConsistent(t, c)

			// The layer went, and with it tree a, whose home it was and which no other
			// layer uses: the config and a are fetched again, b is linked from its home.
			if fetched := fetchedBy(t, c, s, fx); fetched != 2 {
				t.Errorf("reinstall fetched %d blobs, want 2", fetched)
			}
			assertConsistent(t, c)
			b, err := os.ReadFile(filepath.Join(root, "site-packages/a/__init__.py"))
			must(t, err)
			if string(b) != "print('a')\n" {
				t.Errorf("content after repair = %q", b)
			}
		})
	}
}

func TestDoctorFixesTopMode(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	fx := artifact(t, "k", wheelC)
	installAll(t, c, s, fx)
	root, _ := c.Layer(fx.md)
	must(t, os.Chmod(root, 0o755)) // as after a crash between rename and chmod
	rep, err := c.Doctor(ctx, false)
	must(t, err)
	if len(rep.Bad) != 1 {
		t.Errorf("Doctor = %+v, want 1 bad", rep)
	}
	rep, err = c.Doctor(ctx, true)
	must(t, err)
	if len(rep.Bad) != 0 || len(rep.Repaired) != 1 {
		t.Errorf("Doctor(repair) = %+v, want 1 chmod repair and nothing bad", rep)
	}
	if _, ok := c.Layer(fx.md); !ok {
		t.Error("a mode-only problem removed the layer")
	}
	// Install repairs it too.
	must(t, os.Chmod(root, 0o755))
	installAll(t, c, s, fx)
	assertConsistent(t, c)
}
