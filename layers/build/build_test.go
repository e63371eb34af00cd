package build

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
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
