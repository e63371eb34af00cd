package build

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pylayer/pylayer/internal/testenv"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/test/fixture"
)

type countingFetcher struct {
	*index.Client
	downloads atomic.Int32
}

func (c *countingFetcher) Download(ctx context.Context, f index.File, dst string) error {
	c.downloads.Add(1)
	return c.Client.Download(ctx, f, dst)
}

func setup(t *testing.T) (*countingFetcher, lock.Package) {
	t.Helper()
	dir := t.TempDir()
	w := fixture.Wheel{Name: "demo-pkg", Version: "1.0", EntryPoints: "[console_scripts]\ndemo = demo_pkg:main\n"}
	p, err := w.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(p)
	d, _ := digest.SHA256.FromReader(f)
	fi, _ := f.Stat()
	f.Close()
	srv, err := index.NewServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := index.New(hs.URL+"/simple/", index.WithNetrc(""))
	if err != nil {
		t.Fatal(err)
	}
	return &countingFetcher{Client: c}, lock.Package{Name: "demo-pkg", Version: "1.0", Filename: w.Filename(),
		URL: hs.URL + "/files/" + w.Filename(), SHA256: d.Encoded(), Size: fi.Size(), RequiredBy: []string{lock.Requested}}
}

func TestTreeIsBuiltOnceAndShared(t *testing.T) {
	fetch, p := setup(t)
	b := &Builder{Root: t.TempDir(), Fetcher: fetch}
	var wg sync.WaitGroup
	dirs := make([]string, 8)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr, err := b.Tree(context.Background(), p, "3.11")
			if err != nil {
				t.Error(err)
				return
			}
			dirs[i] = tr.Dir
		}()
	}
	wg.Wait()
	for _, d := range dirs[1:] {
		if d != dirs[0] {
			t.Fatalf("trees differ: %v", dirs)
		}
	}
	script, err := os.ReadFile(filepath.Join(dirs[0], "bin", "demo"))
	if err != nil || !strings.HasPrefix(string(script), ScriptShebang+"\n") {
		t.Fatalf("script: %q %v", script, err)
	}
	before := fetch.downloads.Load()
	if _, err := b.Tree(context.Background(), p, "3.11"); err != nil {
		t.Fatal(err)
	}
	if fetch.downloads.Load() != before {
		t.Fatal("a cached tree was fetched again")
	}
	// No temp directories are left behind.
	ents, _ := os.ReadDir(filepath.Join(b.Root, "trees"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp") {
			t.Fatalf("left behind: %s", e.Name())
		}
	}
}

func TestHashMismatchLeavesNothing(t *testing.T) {
	fetch, p := setup(t)
	p.SHA256 = strings.Repeat("0", 64)
	b := &Builder{Root: t.TempDir(), Fetcher: fetch}
	_, err := b.Tree(context.Background(), p, "3.11")
	if !errors.Is(err, index.ErrHashMismatch) {
		t.Fatalf("want a hash mismatch, got %v", err)
	}
	if !strings.Contains(err.Error(), p.Filename) {
		t.Fatalf("the error should name the wheel: %v", err)
	}
	filepath.Walk(b.Root, func(path string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			t.Errorf("left behind: %s", path)
		}
		return nil
	})
}

func TestUnsafeFilenameRefused(t *testing.T) {
	b := &Builder{Root: t.TempDir()}
	_, err := b.Wheel(context.Background(), lock.Package{Filename: "../evil.whl", SHA256: strings.Repeat("a", 64)})
	if err == nil || !strings.Contains(err.Error(), "unsafe") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

// multiSetup serves n wheels of growing size and returns their lock.
func multiSetup(t *testing.T, n int) (*index.Client, *lock.Lock) {
	t.Helper()
	var ws []fixture.Wheel
	for i := range n {
		w := fixture.Wheel{Name: fmt.Sprintf("pkg%d", i), Version: "1.0"}
		mod := fixture.Module(w.Name)
		for j := range 3 * (i + 1) {
			w.Files = append(w.Files, fixture.File{Path: fmt.Sprintf("%s/m%02d.py", mod, j), Data: fmt.Appendf(nil, "X = %d\nS = {'%d', 'é'}\n", j, i)})
		}
		ws = append(ws, w)
	}
	return servedLock(t, ws)
}

// servedLock writes wheels into an index served for the test and returns a client of it
// and the base lock of them all, each requested, for Python 3.11 on manylinux_2_28_x86_64.
func servedLock(t *testing.T, wheels []fixture.Wheel) (*index.Client, *lock.Lock) {
	t.Helper()
	dir := t.TempDir()
	tg, err := target.FromFlags("3.11", "manylinux_2_28_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	l := &lock.Lock{Version: lock.FormatVersion, Kind: lock.KindBase, Target: tg}
	for _, w := range wheels {
		p, err := w.Write(dir)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := os.Open(p)
		d, _ := digest.SHA256.FromReader(f)
		fi, _ := f.Stat()
		f.Close()
		l.Requirements = append(l.Requirements, w.Name)
		l.Packages = append(l.Packages, lock.Package{Name: w.Name, Version: w.Version, Filename: w.Filename(),
			SHA256: d.Encoded(), Size: fi.Size(), RequiredBy: []string{lock.Requested}})
	}
	srv, err := index.NewServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := index.New(hs.URL+"/simple/", index.WithNetrc(""))
	if err != nil {
		t.Fatal(err)
	}
	for i := range l.Packages {
		l.Packages[i].URL = hs.URL + "/files/" + l.Packages[i].Filename
	}
	return c, l
}

// TestEachTree: fn sees every tree once, with its index, as Trees returns them, a new one
// in its temporary directory, which is in place (and the temporary gone) once EachTree
// returns; a tree already built is handed out without fetching; fn's error is
// EachTree's, and stops it.
func TestEachTree(t *testing.T) {
	c, l := multiSetup(t, 5)
	fetch := &countingFetcher{Client: c}
	b := &Builder{Root: t.TempDir(), Fetcher: fetch, Options: Options{Jobs: 2}}
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[int]Tree{}
	err := b.EachTree(ctx, l, func(_ context.Context, i int, tr Tree) error {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := seen[i]; dup {
			t.Errorf("tree %d twice", i)
		}
		if _, err := os.Stat(filepath.Join(tr.Dir, "site-packages")); err != nil {
			t.Errorf("tree %d is not in place when fn sees it: %v", i, err)
		}
		seen[i] = tr
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	trees, err := b.Trees(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(trees) {
		t.Fatalf("fn saw %d trees, want %d", len(seen), len(trees))
	}
	for i, tr := range trees {
		if seen[i].Key != tr.Key || seen[i].Package.Filename != l.Packages[i].Filename {
			t.Errorf("tree %d: fn saw %+v, Trees says %+v", i, seen[i], tr)
		}
		if seen[i].Dir == tr.Dir {
			t.Errorf("tree %d was new, but fn saw it in place already", i)
		}
		if _, err := os.Stat(seen[i].Dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("tree %d: its temporary directory %s is still there (%v)", i, seen[i].Dir, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(b.Root, "trees")); len(ents) != len(trees) {
		t.Errorf("trees/ has %d entries, want %d", len(ents), len(trees))
	}
	if n := fetch.downloads.Load(); n != int32(len(l.Packages)) {
		t.Errorf("%d downloads for %d wheels", n, len(l.Packages))
	}

	// All cached, one job: the biggest wheel first, in place.
	b.Options.Jobs = 1
	var order []int64
	boom := errors.New("boom")
	err = b.EachTree(ctx, l, func(_ context.Context, i int, tr Tree) error {
		if tr.Dir != trees[i].Dir {
			t.Errorf("cached tree %d handed out at %s, not in place", i, tr.Dir)
		}
		order = append(order, l.Packages[i].Size)
		if len(order) == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("fn's error: got %v", err)
	}
	if len(order) != 3 || !slices.IsSortedFunc(order, func(a, b int64) int { return cmp.Compare(b, a) }) {
		t.Errorf("sizes in the order fn saw them: %v, want the 3 biggest, biggest first, then the stop", order)
	}
}

// TestEachTreeSharesOneCompiler: the .pyc of every tree of a build are compiled by
// Jobs interpreter processes at most, not one per wheel, those CompiledBy started, and
// the trees are those that Tree builds alone.
func TestEachTreeSharesOneCompiler(t *testing.T) {
	testenv.Integration(t, "Debian's /usr/bin/python3.11")
	const real = "/usr/bin/python3.11"
	starts := filepath.Join(t.TempDir(), "starts")
	interp := filepath.Join(t.TempDir(), "python3")
	script := "#!/bin/sh\necho started >> " + starts + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(interp, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c, l := multiSetup(t, 6)
	ctx := context.Background()
	b := &Builder{Root: t.TempDir(), Fetcher: c, Options: Options{Interpreter: interp, Jobs: 2}}
	if _, err := b.CompiledBy(ctx); err != nil { // the probe: one start
		t.Fatal(err)
	}
	trees, err := b.Trees(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(starts)
	if n := strings.Count(string(log), "started"); n > 2 {
		t.Errorf("%d interpreter starts for %d wheels with 2 jobs: want at most 2 (the probe's are the build's)", n, len(l.Packages))
	}
	alone := &Builder{Root: t.TempDir(), Fetcher: c, Options: Options{Interpreter: interp}}
	for i, p := range l.Packages {
		want, err := alone.Tree(ctx, p, "3.11")
		if err != nil {
			t.Fatal(err)
		}
		if want.Key != trees[i].Key {
			t.Fatalf("%s: keys differ", p.Filename)
		}
		if a, b := treeBytes(t, want.Dir), treeBytes(t, trees[i].Dir); !maps.Equal(a, b) {
			t.Errorf("%s: the tree differs from one built alone", p.Filename)
		}
	}
}

func treeBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("empty tree %s", dir)
	}
	return out
}

// TestStampPrefetches: Stamp starts fetching the lock's wheels; they arrive without
// anyone asking for them, and the build that follows fetches none again.
func TestStampPrefetches(t *testing.T) {
	c, l := multiSetup(t, 4)
	fetch := &countingFetcher{Client: c}
	b := &Builder{Root: t.TempDir(), Fetcher: fetch}
	ctx := context.Background()
	if _, err := b.Stamp(ctx, l); err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Packages { // until each is in the wheelhouse
		for {
			if _, ok := b.inWheelhouse(p); ok && b.underWay(p) == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if n := fetch.downloads.Load(); n != int32(len(l.Packages)) {
		t.Fatalf("%d downloads after Stamp, want %d", n, len(l.Packages))
	}
	if _, err := b.Trees(ctx, l); err != nil {
		t.Fatal(err)
	}
	if n := fetch.downloads.Load(); n != int32(len(l.Packages)) {
		t.Errorf("%d downloads after the build, want %d: the build fetched again", n, len(l.Packages))
	}
}

// TestWheelWaitsForPrefetch: Wheel called while a prefetch is under way takes its result
// instead of fetching the same wheel a second time.
func TestWheelWaitsForPrefetch(t *testing.T) {
	c, l := multiSetup(t, 3)
	fetch := &countingFetcher{Client: c}
	b := &Builder{Root: t.TempDir(), Fetcher: fetch}
	ctx := context.Background()
	b.Prefetch(ctx, l)
	var wg sync.WaitGroup
	for _, p := range l.Packages {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.Wheel(ctx, p); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	if n := fetch.downloads.Load(); n != int32(len(l.Packages)) {
		t.Errorf("%d downloads of %d wheels asked for 3 times each during a prefetch", n, len(l.Packages))
	}
}
