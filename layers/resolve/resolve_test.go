package resolve

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/test/fixture"
)

// serve writes wheels into a directory index served by a real in-process server.
func serve(t *testing.T, wheels []fixture.Wheel, sdists [][2]string, yank ...string) *index.Client {
	t.Helper()
	dir := t.TempDir()
	for _, w := range wheels {
		if _, err := w.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sdists {
		if _, err := fixture.Sdist(dir, s[0], s[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, y := range yank {
		if err := fixture.Yank(dir, y, "broken"); err != nil {
			t.Fatal(err)
		}
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
	return c
}

func reqs(t *testing.T, ss ...string) []pep508.Requirement {
	t.Helper()
	var out []pep508.Requirement
	for _, s := range ss {
		r, err := pep508.ParseRequirement(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func tgt(t *testing.T) target.Target {
	tg, err := target.FromFlags("3.11", "manylinux_2_28_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func pins(rs []Resolved) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Name+"=="+r.Version.String())
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

func w(name, version string, deps ...string) fixture.Wheel {
	return fixture.Wheel{Name: name, Version: version, RequiresDist: deps}
}

func TestResolve(t *testing.T) {
	idx := serve(t, []fixture.Wheel{
		w("a", "1.0", "c>=1"), w("a", "2.0", "c>=1", "d; extra == 'x'"),
		w("b", "1.0", "c<2"),
		w("c", "1.0"), w("c", "1.5"), w("c", "2.0"),
		w("d", "1.0"),
		w("e", "1.0"), w("e", "2.0", "missing-dep"),
		w("p", "1.0"), w("p", "2.0b1"),
		w("y", "1.0"), w("y", "2.0"),
		{Name: "rp", Version: "1.0"}, {Name: "rp", Version: "2.0", RequiresPython: ">=3.12"},
		{Name: "plat", Version: "1.0", Tag: "cp311-cp311-manylinux2014_x86_64"}, {Name: "plat", Version: "2.0", Tag: "cp311-cp311-win_amd64"},
	}, [][2]string{{"src", "1.0"}}, "y-2.0-py3-none-any.whl")
	ctx := context.Background()
	cases := []struct {
		name string
		reqs []string
		want string
		err  error
	}{
		{"merged specifiers", []string{"a", "b"}, "a==2.0 b==1.0 c==1.5", nil},
		{"extras", []string{"a[x]"}, "a==2.0 c==2.0 d==1.0", nil},
		{"backtrack past a missing dependency", []string{"e"}, "e==1.0", nil},
		{"final over pre", []string{"p"}, "p==1.0", nil},
		{"pre when asked", []string{"p>=2.0b1"}, "p==2.0b1", nil},
		{"yanked skipped", []string{"y"}, "y==1.0", nil},
		{"yanked pinned", []string{"y==2.0"}, "y==2.0", nil},
		{"requires-python", []string{"rp"}, "rp==1.0", nil},
		{"platform", []string{"plat"}, "plat==1.0", nil},
		{"markers false", []string{"a; sys_platform == 'win32'"}, "", nil},
		{"not found", []string{"nope"}, "", ErrNotFound},
		{"sdist only", []string{"src"}, "", ErrNoWheel},
		{"conflict", []string{"c>=2", "b"}, "", ErrConflict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Resolve(ctx, idx, reqs(t, c.reqs...), Options{Target: tgt(t)})
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("want %v, got %v (%s)", c.err, err, pins(got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p := pins(got); p != c.want {
				t.Fatalf("got %q, want %q", p, c.want)
			}
		})
	}
}

func TestBasePinConflictNamesThePin(t *testing.T) {
	idx := serve(t, []fixture.Wheel{w("foo", "1.0"), w("foo", "2.0"), w("pkg-b", "2.0", "foo>=2"), w("ok", "1.0", "foo")}, nil)
	base := []Pin{{Name: "foo", Version: pep440.MustParse("1.0"), File: index.File{Filename: "foo-1.0-py3-none-any.whl"}}}
	_, err := Resolve(context.Background(), idx, reqs(t, "pkg-b"), Options{Target: tgt(t), Base: base})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("want a conflict, got %v", err)
	}
	want := "pkg-b 2.0 requires foo>=2, but the base layer pins foo==1.0"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q does not say %q", err, want)
	}
	// A request the base satisfies adds only the delta.
	got, err := Resolve(context.Background(), idx, reqs(t, "ok"), Options{Target: tgt(t), Base: base})
	if err != nil || pins(got) != "ok==1.0" {
		t.Fatalf("got %s, %v", pins(got), err)
	}
}

func TestConstraintsNarrowNeverAdd(t *testing.T) {
	idx := serve(t, []fixture.Wheel{w("a", "1.0", "c"), w("c", "1.0"), w("c", "2.0"), w("z", "1.0")}, nil)
	got, err := Resolve(context.Background(), idx, reqs(t, "a"), Options{Target: tgt(t), Constraints: reqs(t, "c<2", "z==1.0")})
	if err != nil {
		t.Fatal(err)
	}
	if p := pins(got); p != "a==1.0 c==1.0" {
		t.Fatalf("got %s", p)
	}
	if got[0].RequiredBy[0] != "(requested)" || got[1].RequiredBy[0] != "a" {
		t.Fatalf("required_by: %v %v", got[0].RequiredBy, got[1].RequiredBy)
	}
}

func TestTooComplexIsBounded(t *testing.T) {
	var ws []fixture.Wheel
	for _, v := range []string{"1", "2", "3", "4", "5", "6"} {
		ws = append(ws, w("x", v, "y"), w("y", v, "z>"+v), w("z", v))
	}
	idx := serve(t, ws, nil)
	_, err := Resolve(context.Background(), idx, reqs(t, "x", "z==1"), Options{Target: tgt(t), MaxSteps: 5})
	if !errors.Is(err, ErrTooComplex) && !errors.Is(err, ErrConflict) {
		t.Fatalf("want a bounded failure, got %v", err)
	}
}

// slowIndex is an in-process Index of wheels given as name -> version -> Requires-Dist,
// whose Metadata for the file held waits until its context ends, and for the file after
// until the held one was asked for.
type slowIndex struct {
	projects    map[string]map[string][]string
	fail        map[string]error // filename -> Metadata's error
	misnamed    map[string]bool  // filename -> its METADATA names another project
	held, after string
	asked       chan struct{} // closed when the held file is asked for
	once        sync.Once
	inFlight    atomic.Int64
	ended       atomic.Int64 // held calls that ended, cancelled
}

func (x *slowIndex) Files(ctx context.Context, project string) ([]index.File, error) {
	vs, ok := x.projects[project]
	if !ok {
		return nil, index.ErrNotFound
	}
	var fs []index.File
	for v := range vs {
		name := project + "-" + v + "-py3-none-any.whl"
		fs = append(fs, index.File{Project: project, Filename: name, URL: "http://idx/" + name, SHA256: strings.Repeat("0", 64)})
	}
	return fs, nil
}

func (x *slowIndex) Metadata(ctx context.Context, f index.File) ([]byte, error) {
	x.inFlight.Add(1)
	defer x.inFlight.Add(-1)
	if err := x.fail[f.Filename]; err != nil {
		return nil, err
	}
	switch f.Filename {
	case x.held:
		x.once.Do(func() { close(x.asked) })
		<-ctx.Done()
		x.ended.Add(1)
		return nil, ctx.Err()
	case x.after:
		select {
		case <-x.asked:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	name, rest, _ := strings.Cut(f.Filename, "-")
	version, _, _ := strings.Cut(rest, "-")
	md := "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n"
	if x.misnamed[f.Filename] {
		md = "Metadata-Version: 2.1\nName: other\nVersion: " + version + "\n"
	}
	for _, d := range x.projects[name][version] {
		md += "Requires-Dist: " + d + "\n"
	}
	return []byte(md), nil
}

// TestMetadataAheadEndsWithResolve: the metadata of a project's likely pick is asked for
// ahead (c 2.0, for a's "c"), and a guess that a later requirement rules out (b wants
// c<2) neither changes the result nor outlives Resolve: its fetch is cancelled and waited
// for. The index answers for c 1.0, the pick, only once c 2.0 was asked for.
func TestMetadataAheadEndsWithResolve(t *testing.T) {
	x := &slowIndex{projects: map[string]map[string][]string{
		"a": {"1.0": {"c"}},
		"b": {"1.0": {"c<2"}},
		"c": {"1.0": nil, "2.0": nil},
	}, held: "c-2.0-py3-none-any.whl", after: "c-1.0-py3-none-any.whl", asked: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failure: c 2.0 never asked for
	defer cancel()
	got, err := Resolve(ctx, x, reqs(t, "a", "b"), Options{Target: tgt(t)})
	if err != nil {
		t.Fatal(err)
	}
	if p := pins(got); p != "a==1.0 b==1.0 c==1.0" {
		t.Fatalf("got %q, want a==1.0 b==1.0 c==1.0", p)
	}
	if n := x.inFlight.Load(); n != 0 {
		t.Errorf("%d metadata fetches still running after Resolve returned", n)
	}
	if n := x.ended.Load(); n != 1 {
		t.Errorf("the held fetch of c 2.0 ended %d times, want once (asked ahead, then cancelled)", n)
	}
}

// TestMetadataFailureIsAnError: a candidate whose metadata says it is another project is
// discarded, as pip does, and the next version tried; one whose metadata the index failed
// to give (a refused connection, a hash mismatch) ends the resolution with that error
// instead of settling on an older version because of the failure.
func TestMetadataFailureIsAnError(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:9: connection refused")
	for _, tc := range []struct {
		name string
		x    *slowIndex
		want string // pins, or "" for an error
		err  error
	}{
		{"misnamed skipped", &slowIndex{misnamed: map[string]bool{"c-2.0-py3-none-any.whl": true}}, "c==1.0", nil},
		{"refused", &slowIndex{fail: map[string]error{"c-2.0-py3-none-any.whl": refused}}, "", refused},
		{"hash mismatch", &slowIndex{fail: map[string]error{"c-2.0-py3-none-any.whl": fmt.Errorf("metadata of c-2.0: %w", index.ErrHashMismatch)}}, "", index.ErrHashMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.x.projects = map[string]map[string][]string{"c": {"1.0": nil, "2.0": nil}}
			got, err := Resolve(context.Background(), tc.x, reqs(t, "c"), Options{Target: tgt(t)})
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("got %q, %v; want the error %v", pins(got), err, tc.err)
				}
				return
			}
			if err != nil || pins(got) != tc.want {
				t.Fatalf("got %q, %v; want %s", pins(got), err, tc.want)
			}
		})
	}
}
