package resolve

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/test/fixture"
)

// indexes writes wheels once and serves the directory twice: through pylayer's own index
// server (PEP 691 JSON, sizes given) and as a plain PEP 503 directory (sha256 fragments,
// no sizes).
func indexes(t *testing.T, wheels ...fixture.Wheel) (dir string, full, plain *index.Client) {
	t.Helper()
	dir = t.TempDir()
	for _, w := range wheels {
		if _, err := w.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := index.NewServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	client := func(h http.Handler) *index.Client {
		hs := httptest.NewServer(h)
		t.Cleanup(hs.Close)
		c, err := index.New(hs.URL+"/simple/", index.WithNetrc(""))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return dir, client(srv), client(fixture.PlainIndex(dir))
}

// TestNewLockFillsSizes: a plain PEP 503 index gives no sizes. NewLock takes each from
// reading the wheel's metadata (the Content-Range of its range answers), so the lock is
// the one a sized index gives (but for the URLs, which name the server), without a
// download. Where that read found nothing (the metadata came from the cache), the size is
// that of the wheel fetched into the wheelhouse, and without one NewLock says so.
func TestNewLockFillsSizes(t *testing.T) {
	ctx := context.Background()
	dir, full, plain := indexes(t, w("a", "1.0", "b>=1"), w("b", "1.0"), w("b", "2.0"))
	spec := LockSpec{Kind: lock.KindBase, Target: tgt(t), Requirements: reqs(t, "a")}
	fromFull, err := NewLock(ctx, full, nil, spec)
	if err != nil {
		t.Fatalf("sized index: %v", err)
	}
	same := func(what string, l *lock.Lock) {
		t.Helper()
		if len(l.Packages) != 2 || len(fromFull.Packages) != 2 {
			t.Fatalf("%s: packages %+v, sized index %+v", what, l.Packages, fromFull.Packages)
		}
		for i, p := range l.Packages {
			q := fromFull.Packages[i]
			fi, err := os.Stat(filepath.Join(dir, p.Filename))
			if err != nil {
				t.Fatal(err)
			}
			if p.Size != fi.Size() || p.Size != q.Size || p.SHA256 != q.SHA256 || p.Filename != q.Filename || p.Version != q.Version {
				t.Errorf("%s: locked %+v, sized index %+v (file is %d bytes)", what, p, q, fi.Size())
			}
		}
		if l.Requirements[0] != "a" {
			t.Errorf("%s: requirements recorded %q, want [a]", what, l.Requirements)
		}
	}
	fromPlain, err := NewLock(ctx, plain, nil, spec)
	if err != nil {
		t.Fatalf("plain index, sizes from the range answers: %v", err)
	}
	same("plain index", fromPlain)

	// The metadata from the cache: no read of the wheels, so no sizes.
	cache := t.TempDir()
	hs := httptest.NewServer(fixture.PlainIndex(dir))
	t.Cleanup(hs.Close)
	cached := func() *index.Client {
		c, err := index.New(hs.URL+"/simple/", index.WithNetrc(""), index.WithMetadataCache(cache))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, err := NewLock(ctx, cached(), nil, spec); err != nil { // fills the cache
		t.Fatal(err)
	}
	again := cached()
	if _, err := NewLock(ctx, again, nil, spec); err == nil || !strings.Contains(err.Error(), "no size") {
		t.Fatalf("plain index, metadata cached, no wheelhouse: err %v, want one saying the index gives no size", err)
	}
	wh := &build.Builder{Root: t.TempDir(), Fetcher: again}
	fromWheelhouse, err := NewLock(ctx, again, wh, spec)
	if err != nil {
		t.Fatalf("plain index, metadata cached: %v", err)
	}
	same("plain index, metadata cached", fromWheelhouse)
	for _, p := range fromWheelhouse.Packages {
		if _, err := os.Stat(filepath.Join(wh.Root, "wheels", p.SHA256, p.Filename)); err != nil {
			t.Errorf("%s is not in the wheelhouse after its size was filled: %v", p.Filename, err)
		}
	}
}

// TestNewLockExt: an ext lock records its base's key, keeps its pins out of the result,
// records what it is told to, and keeps a pinned package as it is.
func TestNewLockExt(t *testing.T) {
	ctx := context.Background()
	_, full, _ := indexes(t, w("pin", "1.0"), w("pin", "2.0"), w("foo", "1.0", "pin"), w("up", "1.0"))
	base, err := NewLock(ctx, full, nil, LockSpec{Kind: lock.KindBase, Target: tgt(t), Requirements: reqs(t, "pin<2")})
	if err != nil {
		t.Fatal(err)
	}
	baseKey, _ := base.Key()
	up := lock.Package{Name: "up", Version: "1.0", Filename: "up-1.0-py3-none-any.whl", URL: "upload:" + strings.Repeat("a", 64),
		SHA256: strings.Repeat("a", 64), Size: 10, RequiredBy: []string{lock.Requested}}
	tests := []struct {
		name    string
		spec    LockSpec
		want    string // name==version of the packages, or the error
		wantErr func(error) bool
	}{
		{"delta", LockSpec{Kind: lock.KindExt, Base: base, Requirements: reqs(t, "foo")}, "foo==1.0", nil},
		{"pinned kept", LockSpec{Kind: lock.KindExt, Base: base, Requirements: reqs(t, "foo", "up"), Record: []string{"foo", "up==1.0"}, Pinned: []lock.Package{up}},
			"foo==1.0 up==1.0", nil},
		{"pinned in base", LockSpec{Kind: lock.KindExt, Base: base, Pinned: []lock.Package{{Name: "pin", Version: "1.0"}}}, "",
			func(err error) bool { var ce *ConflictError; return errors.As(err, &ce) && ce.Project == "pin" }},
		{"base pin conflict", LockSpec{Kind: lock.KindExt, Base: base, Requirements: reqs(t, "pin>=2")}, "",
			func(err error) bool { var ce *ConflictError; return errors.As(err, &ce) && len(ce.BasePins()) > 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Target = tgt(t)
			l, err := NewLock(ctx, full, nil, tc.spec)
			if tc.wantErr != nil {
				if err == nil || !tc.wantErr(err) {
					t.Fatalf("err %v, want a conflict", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range l.Packages {
				got = append(got, p.Name+"=="+p.Version)
			}
			if strings.Join(got, " ") != tc.want || l.Base != baseKey || l.Kind != lock.KindExt {
				t.Errorf("got %v base %s kind %s, want %s over %s", got, l.Base, l.Kind, tc.want, baseKey)
			}
			if tc.spec.Record != nil && strings.Join(l.Requirements, " ") != strings.Join(tc.spec.Record, " ") {
				t.Errorf("recorded %v, want %v", l.Requirements, tc.spec.Record)
			}
		})
	}
}

// TestPackageNeedsSHA256: a file without a hash is never locked.
func TestPackageNeedsSHA256(t *testing.T) {
	_, err := Package(context.Background(), nil, Resolved{Name: "a", File: index.File{Filename: "a-1.0-py3-none-any.whl", Size: 3}})
	if err == nil || !strings.Contains(err.Error(), "no sha256") {
		t.Fatalf("err %v, want one saying the index gives no sha256", err)
	}
}

// TestNewLockSameWithoutMetadataFiles: the same requirements lock to the same bytes (and
// key) against an index with PEP 658 metadata files and sizes and against a plain PEP 503
// index of the same directory. On the plain one, METADATA is read with range requests,
// whose answers name each file's size: no wheel is downloaded whole.
func TestNewLockSameWithoutMetadataFiles(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	blob := make([]byte, 300<<10)
	for i := range blob {
		blob[i] = byte(r.Uint32())
	}
	big := func(fw fixture.Wheel) fixture.Wheel {
		mod := fixture.Module(fw.Name)
		fw.Files = []fixture.File{{Path: mod + "/__init__.py", Data: []byte("pass\n")}, {Path: mod + "/blob.bin", Data: blob}}
		return fw
	}
	dir := t.TempDir()
	for _, fw := range []fixture.Wheel{
		w("app", "1.0", "lib", "dep<2", "extra-host[more]"),
		big(w("lib", "2.0", "dep>=2")), // ruled out by app's dep<2: read, never downloaded
		w("lib", "1.0", "dep"),
		w("dep", "1.0"), w("dep", "2.0"),
		{Name: "extra-host", Version: "1.0", ProvidesExtra: []string{"more"}, RequiresDist: []string{`dep; extra == "more"`}},
		big(w("unused", "1.0")),
	} {
		if _, err := fw.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	var servers []*httptest.Server
	client := func(h http.Handler) *index.Client {
		hs := httptest.NewServer(h)
		t.Cleanup(hs.Close)
		servers = append(servers, hs)
		c, err := index.New(hs.URL+"/simple/", index.WithNetrc(""))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	withMeta, err := index.NewServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	plainSrv, err := index.NewServer(dir, index.WithJSON(false), index.WithMetadataFiles(false))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	whole := map[string]int{}     // file -> downloads without Range
	rangeSent := map[string]int{} // file -> body bytes sent for range requests
	plain := client(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		cw := &countWriter{ResponseWriter: rw}
		plainSrv.ServeHTTP(cw, req)
		name := path.Base(req.URL.Path)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasSuffix(name, ".metadata"):
			t.Errorf("the plain index was asked for %s", req.URL.Path)
		case req.Header.Get("Range") != "":
			rangeSent[name] += cw.n
		case strings.HasPrefix(req.URL.Path, "/files/"):
			whole[name]++
		}
	}))
	spec := LockSpec{Kind: lock.KindBase, Target: tgt(t), Requirements: reqs(t, "app")}
	fromMeta, err := NewLock(ctx, client(withMeta), nil, spec)
	if err != nil {
		t.Fatalf("index with metadata files: %v", err)
	}
	fromPlain, err := NewLock(ctx, plain, &build.Builder{Root: t.TempDir(), Fetcher: plain}, spec)
	if err != nil {
		t.Fatalf("plain index: %v", err)
	}
	a, errA := fromMeta.Content()
	b, errB := fromPlain.Content()
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		t.Fatalf("the locks differ (%v, %v):\nwith metadata files: %s\nplain: %s", errA, errB, a, b)
	}
	if got := pinsOf(fromPlain); got != "app==1.0 dep==1.0 extra-host==1.0 lib==1.0" {
		t.Errorf("locked %s", got)
	}
	for _, hs := range servers {
		hs.Close() // every handler is done
	}
	mu.Lock()
	defer mu.Unlock()
	for name, n := range whole {
		t.Errorf("%s was downloaded whole %d times", name, n)
	}
	if n := rangeSent["lib-2.0-py3-none-any.whl"]; n == 0 || n > len(blob)/2 {
		t.Errorf("lib 2.0 (%d bytes of blob) was read with %d bytes of range answers, want a part of it", len(blob), n)
	}
}

func pinsOf(l *lock.Lock) string {
	var s []string
	for _, p := range l.Packages {
		s = append(s, p.Name+"=="+p.Version)
	}
	return strings.Join(s, " ")
}

type countWriter struct {
	http.ResponseWriter
	n int
}

func (w *countWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += n
	return n, err
}
