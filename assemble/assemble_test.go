package assemble

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/registry"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/local"
	"github.com/pylayer/pylayer/registry/trust"
	"github.com/pylayer/pylayer/sandbox"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// putLayer writes a one-wheel layer of kind k, whose lock names its blob, into the OCI
// layout dir and returns its reference by digest.
func putLayer(t *testing.T, dir string, k lock.Kind, name string) string {
	t.Helper()
	ctx := context.Background()
	tree := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(tree, "site-packages"), 0o755))
	must(t, os.WriteFile(filepath.Join(tree, "site-packages", name+".py"), []byte("print(1)\n"), 0o644))
	f, err := os.Create(filepath.Join(t.TempDir(), name+".tar.gz"))
	must(t, err)
	bw := bufio.NewWriter(f)
	desc, _, err := oci.TarTree(ctx, tree, bw)
	must(t, err)
	must(t, bw.Flush())
	must(t, f.Close())
	blob := oci.LayerBlob{Path: f.Name(), Desc: desc, Title: oci.BlobTitle(name + "-1.0-py3-none-any.whl"), Wheel: name + "-1.0-py3-none-any.whl", WheelSHA256: digest.FromString(name).Encoded()}
	l := layerLock(t, k, name)
	if k == lock.KindExt { // over the base putLayer makes of "pin"
		key, err := layerLock(t, lock.KindBase, "pin").Key()
		must(t, err)
		l.Base = key
	}
	canon, err := l.Content()
	must(t, err)
	a := oci.Artifact{ArtifactType: oci.ArtifactTypeLayer, Config: canon, Layers: []oci.LayerBlob{blob},
		Annotations: map[string]string{oci.AnnotationKind: string(k), oci.AnnotationKey: lock.KeyOf(canon)}}
	layout, err := oci.OpenLayout(dir)
	must(t, err)
	md, err := layout.Put(ctx, a, name)
	must(t, err)
	return "oci:" + dir + "@" + md.Digest.String()
}

// layerLock is the lock of putLayer's one-wheel layer of kind k (an ext one without its base).
func layerLock(t *testing.T, k lock.Kind, name string) *lock.Lock {
	t.Helper()
	tg, err := target.FromFlags("3.11", "manylinux_2_28_x86_64")
	must(t, err)
	title := name + "-1.0-py3-none-any.whl"
	return &lock.Lock{Version: lock.FormatVersion, Kind: k, Target: tg, Requirements: []string{name}, Packages: []lock.Package{{
		Name: name, Version: "1.0", Filename: title, URL: "https://index.invalid/" + title,
		SHA256: digest.FromString(name).Encoded(), Size: 1, RequiredBy: []string{lock.Requested}}}}
}

// unsignedPolicy accepts unsigned artifacts from the layout dir, by explicit choice.
func unsignedPolicy(t *testing.T, dir string) *trust.Policy {
	t.Helper()
	b, err := json.Marshal(map[string]any{"repositories": []trust.Rule{{Match: "oci:" + dir, InsecureAcceptUnsigned: true}}})
	must(t, err)
	p := filepath.Join(t.TempDir(), "policy.json")
	must(t, os.WriteFile(p, b, 0o644))
	pol, err := trust.Load(p)
	must(t, err)
	return pol
}

func testOptions(t *testing.T, dir string) Options {
	t.Helper()
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
	must(t, err)
	t.Cleanup(func() { // the cache makes its trees read-only
		filepath.Walk(filepath.Dir(c.Root()), func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	pol := unsignedPolicy(t, dir)
	return Options{Cache: c, Policy: func() (*trust.Policy, error) { return pol, nil }, Fetch: registry.Fetch(registry.Options{})}
}

// TestAssemble: layers come out held, in mount order, with their kinds; an artifact of the
// wrong kind in either place is refused, naming the flag.
func TestAssemble(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layout")
	base := putLayer(t, dir, lock.KindBase, "pin")
	ext := putLayer(t, dir, lock.KindExt, "foo")
	o := testOptions(t, dir)

	e, err := Assemble(ctx, o, "", []string{base, ext})
	must(t, err)
	defer e.Release()
	if e.Interpreter != nil || len(e.Layers) != 2 || e.Layers[0].Kind != lock.KindBase || e.Layers[1].Kind != lock.KindExt {
		t.Fatalf("Assemble = %+v, want no interpreter, then base and ext", e)
	}
	spec := sandbox.Spec{Interpreter: "/stale"}
	e.Apply(&spec)
	want := []sandbox.Layer{
		{Root: e.Layers[0].Root, Kind: sandbox.KindBase, Name: "0-base"},
		{Root: e.Layers[1].Root, Kind: sandbox.KindExt, Name: "1-ext"},
	}
	if spec.Interpreter != "" || len(spec.Layers) != 2 || spec.Layers[0] != want[0] || spec.Layers[1] != want[1] {
		t.Errorf("Apply: %+v, want degraded with %+v", spec, want)
	}
	if !spec.Degraded() {
		t.Error("a spec without an interpreter is not degraded")
	}
	for _, l := range e.Layers {
		if fi, err := os.Stat(l.Root); err != nil || !fi.IsDir() {
			t.Errorf("layer root %s: %v", l.Root, err)
		}
	}
	e.Release()
	e.Release() // idempotent

	for _, c := range []struct {
		name   string
		python string
		layers []string
		want   string
	}{
		{"a layer as the interpreter", base, nil, "--python " + base + " is a base layer, not an interpreter"},
		{"a bad reference", "", []string{"oci:" + dir + "@sha256:nothex"}, "--layer oci:"},
		{"a missing layer", "", []string{base, "oci:" + dir + "@" + digest.FromString("none").String()}, "--layer oci:"},
		{"an ext layer without its base", "", []string{ext}, "layer " + ext + " needs base "},
		{"an ext layer on another base", "", []string{putLayer(t, dir, lock.KindBase, "other"), ext}, "layer " + ext + " needs base "},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := Assemble(ctx, o, c.python, c.layers)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				e.Release()
				t.Fatalf("Assemble: %v, want an error with %q", err, c.want)
			}
			if e != nil {
				t.Errorf("Assemble returned %+v with its error", e)
			}
		})
	}
}

// TestKindOf reads the kind the cache keeps beside a layer root.
func TestKindOf(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layout")
	o := testOptions(t, dir)
	l, err := Ensure(ctx, o, putLayer(t, dir, lock.KindIso, "iso"))
	must(t, err)
	defer l.Release()
	if k, err := KindOf(l.Root); err != nil || k != lock.KindIso {
		t.Errorf("KindOf = %q, %v; want iso", k, err)
	}
	if _, err := KindOf(t.TempDir()); err == nil {
		t.Error("KindOf of a directory without a manifest: no error")
	}
}

// TestAssembleOffline: without Fetch, what the cache holds is assembled as with it, and a
// reference it lacks (a digest not pulled, a tag) fails with local.ErrNeedsNetwork,
// holding nothing; the cache is not written.
func TestAssembleOffline(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layout")
	base := putLayer(t, dir, lock.KindBase, "pin")
	ext := putLayer(t, dir, lock.KindExt, "foo")
	o := testOptions(t, dir)
	e, err := Assemble(ctx, o, "", []string{base}) // pulled, with Fetch
	must(t, err)
	e.Release()

	o.Fetch = nil
	e, err = Assemble(ctx, o, "", []string{base})
	must(t, err)
	if len(e.Layers) != 1 || e.Layers[0].Kind != lock.KindBase {
		t.Fatalf("offline Assemble = %+v", e)
	}
	e.Release()
	for _, refs := range [][]string{{base, ext}, {"oci:" + dir + ":pin"}} {
		if _, err := Assemble(ctx, o, "", refs); !errors.Is(err, local.ErrNeedsNetwork) || !strings.Contains(err.Error(), refs[len(refs)-1]) {
			t.Errorf("offline Assemble of %v: %v, want local.ErrNeedsNetwork naming the reference", refs, err)
		}
	}
	if _, ok := o.Cache.Layer(digest.Digest(ext[strings.LastIndexByte(ext, '@')+1:])); ok {
		t.Error("an offline Assemble pulled the ext layer")
	}
	// Nothing stays held after the refusals.
	entries, err := o.Cache.List(ctx)
	must(t, err)
	for _, en := range entries {
		if en.Held {
			t.Errorf("%s is held after the refusals", en.Digest)
		}
	}
}
