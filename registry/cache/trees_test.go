package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// hookSteps replaces testHook for the test with f, called under a lock.
func hookSteps(t *testing.T, f func(step string)) {
	var mu sync.Mutex
	old := testHook
	testHook = func(step string) {
		mu.Lock()
		defer mu.Unlock()
		f(step)
	}
	t.Cleanup(func() { testHook = old })
}

// TestInstallOneSyncFS: an install makes its new trees and its layer safe to rename
// into view once, and nothing of it is visible before: where the boot is known, with a
// record of them (and no syncfs at all), else with one syncfs.
func TestInstallOneSyncFS(t *testing.T) {
	for _, boot := range []string{"", "boot-a"} {
		for _, inMemory := range []bool{true, false} {
			name := map[bool]string{true: "blobs in memory", false: "blobs in files"}[inMemory]
			name += map[bool]string{true: ", boot unknown: syncfs", false: ", boot known: a record"}[boot == ""]
			t.Run(name, func(t *testing.T) {
				withBoot(t, boot)
				if !inMemory {
					old := maxMemBlobBytes
					maxMemBlobBytes = 0
					t.Cleanup(func() { maxMemBlobBytes = old })
				}
				installOnce(t, boot != "")
			})
		}
	}
}

func installOnce(t *testing.T, lazy bool) {
	ctx := context.Background()
	c := openCache(t, WithParallelism(2))
	s := newStore()
	fx1 := s.add(artifact(t, "k1", wheelA, wheelB, wheelC))
	other := wheel{"d-1.0-py3-none-any.whl", map[string]string{"site-packages/d.py": "D = 4\n"}}
	fx2 := s.add(artifact(t, "k2", wheelB, other))
	trees := filepath.Join(c.Root(), "trees", "sha256")
	layers := filepath.Join(c.Root(), "layers", "sha256")
	want, unwanted := "syncfs", "recorded"
	if lazy {
		want, unwanted = unwanted, want
	}
	for _, tc := range []struct {
		fx         fixture
		treesSeen  int // tree entries (directory and list) visible then: the earlier installs'
		layersSeen int
		newTrees   int
	}{{fx1, 0, 0, 3}, {fx2, 6, 1, 1}} {
		seen, others := 0, 0
		before := names(t, c.unsyncedDir())
		hookSteps(t, func(step string) {
			switch step {
			case unwanted:
				others++
				return
			case want:
			default:
				return
			}
			seen++
			if n := names(t, trees); len(n) != tc.treesSeen {
				t.Errorf("at the %s, trees/ holds %v: want %d entries, none of this install", want, n, tc.treesSeen)
			}
			if n := names(t, layers); len(n) != tc.layersSeen {
				t.Errorf("at the %s, layers/ holds %v", want, n)
			}
		})
		root, err := c.Install(ctx, tc.fx.md, tc.fx.manifest, s.fetch, nil)
		must(t, err)
		if seen != 1 || others != 0 {
			t.Errorf("install of %s: %d %s and %d %s, want one %s and no %s", tc.fx.md, seen, want, others, unwanted, want, unwanted)
		}
		if got, ok := c.Layer(tc.fx.md); !ok || got != root {
			t.Errorf("Layer = %q, %v; want %q", got, ok, root)
		}
		if lazy {
			var added []string
			for _, n := range names(t, c.unsyncedDir()) {
				if !slices.Contains(before, n) {
					added = append(added, n)
				}
			}
			if len(added) != 1 {
				t.Fatalf("the install added %v to unsynced/, want one record", added)
			}
			var rec unsyncedRecord
			b, err := os.ReadFile(filepath.Join(c.unsyncedDir(), added[0]))
			must(t, err)
			must(t, json.Unmarshal(b, &rec))
			if len(rec.Trees) != tc.newTrees || len(rec.Layers) != 1 || rec.Layers[0] != tc.fx.md.Encoded() || rec.Boot != "boot-a" {
				t.Errorf("record %+v: want the %d new trees, layer %s and boot-a", rec, tc.newTrees, tc.fx.md.Encoded())
			}
		} else if n := names(t, c.unsyncedDir()); len(n) != 0 {
			t.Errorf("unsynced/ holds %v without a known boot", n)
		}
	}
	if n := names(t, filepath.Join(c.Root(), "tmp")); len(n) != 0 {
		t.Errorf("tmp/ not empty: %v", n)
	}
	for _, fx := range []fixture{fx1, fx2} {
		for _, l := range fx.layers {
			if n := s.count(l.Digest); n != 1 {
				t.Errorf("blob %s fetched %d times, want 1", l.Digest, n)
			}
		}
	}
	assertConsistent(t, c)
}

// TestInstallBusyTree: a tree whose lock another installer holds is not
// waited for while this install holds pending trees of its own (two installs
// waiting for each other's trees would deadlock): the others are committed
// first, and the busy one is made once its lock is free.
func TestInstallBusyTree(t *testing.T) {
	ctx := context.Background()
	c := openCache(t, WithParallelism(2))
	s := newStore()
	fx := s.add(artifact(t, "k", wheelA, wheelB, wheelC))
	busy := fx.layers[1].Digest.Encoded()
	held, err := acquire(ctx, c.lockPath("tree", busy), lockMode{exclusive: true, wait: true, create: true})
	must(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
		done <- err
	}()
	// The two free trees appear (a directory and a list each) while the third is held.
	trees := filepath.Join(c.Root(), "trees", "sha256")
	for deadline := time.Now().Add(time.Minute); len(names(t, trees)) < 4; {
		select {
		case err := <-done:
			t.Fatalf("install finished while a tree lock was held: %v", err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			held.release()
			t.Fatalf("the free trees never appeared while one was busy: trees/ = %v", names(t, trees))
		}
	}
	if ok, _ := c.hasTree(busy); ok {
		t.Errorf("the busy tree was made while its lock was held")
	}
	held.release()
	must(t, <-done)
	if _, ok := c.Layer(fx.md); !ok {
		t.Fatal("the layer is not installed")
	}
	for _, l := range fx.layers {
		if n := s.count(l.Digest); n != 1 {
			t.Errorf("blob %s fetched %d times, want 1", l.Digest, n)
		}
	}
	if n := names(t, filepath.Join(c.Root(), "tmp")); len(n) != 0 {
		t.Errorf("tmp/ not empty: %v", n)
	}
	assertConsistent(t, c)
}

// vouching is a blob reader that claims to verify d (Verifier), honestly or not.
type vouching struct {
	io.Reader
	d v1.Descriptor
}

func (v vouching) VerifiesDescriptor() v1.Descriptor { return v.d }
func (v vouching) Close() error                      { return nil }

// TestInstallTrustsOnlyVerifiersOfTheBlob: the cache skips its own hash only for a
// reader that verifies the very descriptor fetched; a corrupted blob is refused
// whichever other reader brings it.
func TestInstallTrustsOnlyVerifiersOfTheBlob(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	fx := s.add(artifact(t, "k", wheelA, wheelB))
	serve := func(corrupt bool, wrap func(r io.Reader, d v1.Descriptor) vouching) Fetch {
		return func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
			rc, err := s.fetch(ctx, d)
			if err != nil || d.MediaType == oci.MediaTypeLock {
				return rc, err
			}
			b, _ := io.ReadAll(rc)
			if corrupt {
				b[len(b)/2] ^= 1
			}
			return wrap(bytes.NewReader(b), d), nil
		}
	}
	honest := func(r io.Reader, d v1.Descriptor) vouching { return vouching{oci.NewVerifyReader(r, d), d} }
	otherDigest := func(r io.Reader, d v1.Descriptor) vouching {
		return vouching{r, v1.Descriptor{Digest: digest.FromString("another blob"), Size: d.Size}}
	}
	otherSize := func(r io.Reader, d v1.Descriptor) vouching {
		return vouching{r, v1.Descriptor{Digest: d.Digest, Size: d.Size + 1}}
	}
	for _, tc := range []struct {
		name    string
		fetch   Fetch
		refused bool
	}{
		{"honest verifier, intact blob", serve(false, honest), false},
		{"honest verifier, corrupted blob", serve(true, honest), true},
		{"verifier of another digest", serve(true, otherDigest), true},
		{"verifier of another size", serve(true, otherSize), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := openCache(t)
			_, err := c.Install(ctx, fx.md, fx.manifest, tc.fetch, nil)
			if tc.refused {
				if !errors.Is(err, oci.ErrDigestMismatch) {
					t.Fatalf("err = %v, want ErrDigestMismatch", err)
				}
				assertNothingLeft(t, c)
				return
			}
			must(t, err)
			assertConsistent(t, c)
		})
	}
}

// TestInstallManyBlobs: blobs fetched into reused buffers, several at a time, each
// unpack into exactly their own content (not only into what their file lists say).
func TestInstallManyBlobs(t *testing.T) {
	ctx := context.Background()
	c := openCache(t, WithParallelism(4))
	s := newStore()
	var wheels []wheel
	for i := range 12 {
		name := fmt.Sprintf("w%02d", i)
		wheels = append(wheels, wheel{name + "-1.0-py3-none-any.whl", map[string]string{
			"site-packages/" + name + "/__init__.py": name,
			"site-packages/" + name + "/data.bin":    randomBytes(t, (i+1)*7<<10),
		}})
	}
	fx := s.add(artifact(t, "many", wheels...))
	root, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
	must(t, err)
	for _, w := range wheels {
		for p, want := range w.files {
			got, err := os.ReadFile(filepath.Join(root, p))
			must(t, err)
			if string(got) != want {
				t.Errorf("%s: %d bytes differing from the wheel's %d", p, len(got), len(want))
			}
		}
	}
	assertConsistent(t, c)
}

// TestEachLayerStartsInOrder: blobs start in the order given (largestFirst's), whatever
// the scheduler does with the goroutines, at most c.parallel at once. Each call waits at a
// barrier until c.parallel have started, so no worker takes a second index before the
// others took theirs: the k-th wave of calls is exactly indices k*p..k*p+p-1.
func TestEachLayerStartsInOrder(t *testing.T) {
	for _, parallel := range []int{1, 2, 4} {
		c := openCache(t, WithParallelism(parallel))
		var mu sync.Mutex
		cond := sync.NewCond(&mu)
		waves := map[int][]int{}
		arrived, wave := 0, 0
		err := c.eachLayer(context.Background(), 40, func(ctx context.Context, i int) error {
			mu.Lock()
			defer mu.Unlock()
			w := wave
			waves[w] = append(waves[w], i)
			if arrived++; arrived == parallel {
				arrived, wave = 0, wave+1
				cond.Broadcast()
			}
			for wave == w {
				cond.Wait()
			}
			return nil
		})
		must(t, err)
		if len(waves) != 40/parallel {
			t.Fatalf("parallel %d: %d waves, want %d: %v", parallel, len(waves), 40/parallel, waves)
		}
		for w, got := range waves {
			sort.Ints(got)
			for k, i := range got {
				if i != w*parallel+k {
					t.Errorf("parallel %d: wave %d started %v, want %d..%d", parallel, w, got, w*parallel, w*parallel+parallel-1)
					break
				}
			}
		}
	}
}
