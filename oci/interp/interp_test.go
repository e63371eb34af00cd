package interp

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

func TestProbeDebianPrefix(t *testing.T) {
	ctx := context.Background()
	before := listTree(t, debianPrefix(t))
	c, err := Probe(ctx, debianPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	if after := listTree(t, debianPrefix(t)); !slices.Equal(before, after) {
		t.Fatalf("Probe wrote into the prefix: %d entries before, %d after", len(before), len(after))
	}
	if d, err := oci.TreeDigest(ctx, debianPrefix(t), oci.TarTreeOptions{AllowSymlinks: true}); err != nil || d.String() != c.Tree {
		t.Fatalf("after Probe the prefix digests to %s (%v), Probe said %s", d, err, c.Tree)
	}
	if c.Version != "3.11.2" || c.Implementation != "cp" || c.ABI != "cp311" || c.MountPath != "/opt/python" || c.Source != SourcePrefix {
		t.Fatalf("config %+v", c)
	}
	// The oracle: the host's own Debian python3.11 of the same build.
	host, err := target.Probe(ctx, "/usr/bin/python3.11")
	if err != nil {
		t.Fatalf("probing the host's /usr/bin/python3.11 (apt-get install python3.11): %v", err)
	}
	if c.Platform != host.Platform || !slices.Equal(c.Platforms, host.Platforms) {
		t.Errorf("platforms %v, host %v", c.Platforms, host.Platforms)
	}
	var want []string
	for _, tg := range host.Tags() {
		want = append(want, tg.String())
	}
	if !slices.Equal(c.Tags, want) {
		t.Errorf("tags differ from the host interpreter's: %d vs %d", len(c.Tags), len(want))
	}
	if len(c.Tags) < 100 || c.Tags[0] != "cp311-cp311-"+c.Platform || c.Tags[len(c.Tags)-1] != "py30-none-any" {
		t.Errorf("tags: %d, first %q, last %q", len(c.Tags), c.Tags[0], c.Tags[len(c.Tags)-1])
	}
	for k, v := range host.Markers {
		if k == "platform_release" || k == "platform_version" {
			v = ""
		}
		if c.Markers[k] != v {
			t.Errorf("marker %s = %q, host %q", k, c.Markers[k], v)
		}
	}
	tt, err := c.Target()
	if err != nil || tt.Python != "3.11" || tt.PythonFull != "3.11.2" {
		t.Errorf("Target() = %+v, %v", tt, err)
	}
}

func TestProbeErrors(t *testing.T) {
	ctx := context.Background()
	empty := t.TempDir()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, "bin"), 0o755)
	os.Symlink("/usr/bin/python3.11", filepath.Join(outside, "bin/python3"))
	for name, dir := range map[string]string{"missing": filepath.Join(empty, "nope"), "empty": empty, "link out": outside} {
		if _, err := Probe(ctx, dir); err == nil {
			t.Errorf("%s: Probe succeeded", name)
		}
	}
}

// build runs Artifact and returns its manifest digest and the artifact.
func build(t *testing.T, input string) (oci.Artifact, Config, v1.Descriptor) {
	t.Helper()
	a, c, err := Artifact(context.Background(), input, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, d, err := a.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return a, c, d
}

var (
	prefixOnce  sync.Once
	prefixArt   oci.Artifact
	prefixCfg   Config
	prefixDesc  v1.Descriptor
	prefixWork  string
	prefixBuilt bool
)

// builtPrefix is the artifact of the Debian prefix, built once for the tests that only read it.
func builtPrefix(t *testing.T) (oci.Artifact, Config, v1.Descriptor) {
	t.Helper()
	prefix := debianPrefix(t) // skips the calling test, every time, where there is none
	prefixOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pylayer-interp-build-*")
		if err != nil {
			return
		}
		prefixWork = dir
		a, c, err := Artifact(context.Background(), prefix, dir)
		if err != nil {
			return
		}
		_, d, err := a.Manifest()
		prefixArt, prefixCfg, prefixDesc, prefixBuilt = a, c, d, err == nil
	})
	if !prefixBuilt {
		t.Fatal("building the artifact of the Debian prefix failed; see TestArtifactReproducible")
	}
	return prefixArt, prefixCfg, prefixDesc
}

func TestArtifactReproducible(t *testing.T) {
	a1, c1, d1 := build(t, debianPrefix(t))
	_, _, d2 := builtPrefix(t)
	if d1.Digest != d2.Digest {
		t.Fatalf("two builds of one prefix differ: %s vs %s", d1.Digest, d2.Digest)
	}
	got, err := ParseConfig(a1.Config)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != c1.Version || !slices.Equal(got.Tags, c1.Tags) {
		t.Fatal("config does not round-trip")
	}
	want := map[string]string{oci.AnnotationKind: "python", oci.AnnotationKey: KeyOf(a1.Config), oci.AnnotationPython: "3.11", oci.AnnotationPlatform: c1.Platform}
	for k, v := range want {
		if a1.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, a1.Annotations[k], v)
		}
	}
	tag, err := TagFor(c1)
	if err != nil || !strings.HasPrefix(tag, "cpython-3.11.2-"+KeyOf(a1.Config)) || oci.ValidTag(tag) != nil || len(tag) >= 128 {
		t.Errorf("tag %q, %v", tag, err)
	}

	// It stores in a layout, and the manifest says what it is.
	lay, err := oci.OpenLayout(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lay.Put(context.Background(), a1, tag)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := lay.Manifest(context.Background(), idx.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != oci.ArtifactTypePython || m.Config.MediaType != oci.MediaTypePythonConfig || len(m.Layers) != 1 ||
		m.Layers[0].MediaType != oci.MediaTypeLayer || m.Layers[0].Annotations[v1.AnnotationTitle] != "cpython-3.11.2-"+c1.Platform+".tar.gz" {
		b, _ := json.Marshal(m)
		t.Fatalf("manifest %s", b)
	}
	if _, ok := m.Layers[0].Annotations[oci.AnnotationWheelSHA256]; ok {
		t.Error("interpreter layer carries a wheel sha256")
	}
}

func TestArtifactEntries(t *testing.T) {
	a, _, _ := builtPrefix(t)
	ents := blobEntries(t, a.Layers[0].Path)
	has := map[string]bool{}
	for i, e := range ents {
		has[e] = true
		if strings.HasPrefix(e, "/") || strings.HasPrefix(e, "./") || strings.HasPrefix(e, "python/") ||
			strings.Contains(e, "__pycache__") && !strings.HasPrefix(e, "lib/python3.11/") {
			t.Errorf("entry %q", e)
		}
		if i > 0 && ents[i-1] >= e {
			t.Errorf("entries not sorted: %q before %q", ents[i-1], e)
		}
	}
	for _, e := range []string{"bin/", "bin/python3 -> python3.11", "bin/python3.11", "lib/python3.11/os.py",
		"lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so",
		"lib/python3.11/_sysconfigdata__linux_x86_64-linux-gnu.py -> _sysconfigdata__x86_64-linux-gnu.py"} {
		if !has[e] {
			t.Errorf("blob lacks %q", e)
		}
	}
	var src int // what the prefix has, and the .pyc added
	for _, e := range ents {
		if !strings.Contains(e, "__pycache__") {
			src++
		}
	}
	if src != len(listTree(t, debianPrefix(t)))-1 { // the root is no entry
		t.Errorf("%d entries besides the .pyc for %d paths", src, len(listTree(t, debianPrefix(t)))-1)
	}
}

// TestArtifactStdlibCompiled: the artifact of Debian's prefix, which has no .pyc,
// carries an unchecked-hash .pyc for every stdlib .py that compiles, named for its
// path in the sandbox; the prefix itself still has none (TestArtifactReproducible:
// two builds give the same bytes).
func TestArtifactStdlibCompiled(t *testing.T) {
	a, _, _ := builtPrefix(t)
	const lib = "lib/python3.11/"
	var pys int
	pycs := map[string][]byte{}
	err := eachBlobFile(t, a.Layers[0].Path, func(name string, body []byte) {
		switch {
		case strings.HasSuffix(name, ".pyc"):
			pycs[name] = body
		case strings.HasPrefix(name, lib) && strings.HasSuffix(name, ".py"):
			pys++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// Compile is what the .pyc were made by: its count of sources skipped is the
	// sources without one.
	b, err := Compile(context.Background(), debianPrefix(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if b.Kept != 0 || b.Compiled+b.Skipped != pys || len(pycs) != b.Compiled || b.Skipped > pys/20 {
		t.Errorf("%d stdlib sources, %d .pyc in the artifact; Compile: %+v", pys, len(pycs), b)
	}
	t.Logf("%d stdlib sources: %d compiled, %d skipped", pys, b.Compiled, b.Skipped)
	for name, body := range pycs {
		dir, file := path.Split(name)
		src := strings.TrimSuffix(dir, "__pycache__/") + strings.TrimSuffix(file, ".cpython-311.pyc") + ".py"
		if !strings.HasPrefix(name, lib) || !strings.HasSuffix(dir, "/__pycache__/") || !strings.HasSuffix(file, ".cpython-311.pyc") {
			t.Errorf("unexpected .pyc %s", name)
			continue
		}
		if len(body) < 16 || body[4] != 1 || body[5]|body[6]|body[7] != 0 {
			t.Errorf("%s: not an unchecked-hash .pyc (flags % x)", name, body[4:8])
		}
		if !bytes.Contains(body, []byte(MountPath+"/"+src)) {
			t.Errorf("%s does not name %s", name, MountPath+"/"+src)
		}
	}
	for _, want := range []string{"json/__init__", "re/__init__", "subprocess", "email/parser", "os", "site"} {
		dir, file := path.Split(want)
		if _, ok := pycs[lib+dir+"__pycache__/"+file+".cpython-311.pyc"]; !ok {
			t.Errorf("no .pyc for %s", want)
		}
	}
	var inPrefix int
	for _, p := range listTree(t, debianPrefix(t)) {
		if strings.HasSuffix(p, ".pyc") {
			inPrefix++
		}
	}
	if inPrefix != 0 {
		t.Errorf("the prefix has %d .pyc: the build wrote into it", inPrefix)
	}
}

func TestArtifactTarball(t *testing.T) {
	tarball := filepath.Join(t.TempDir(), "cpython-3.11.2-x86_64-unknown-linux-gnu-install_only.tar.gz")
	tarballOf(t, debianPrefix(t), tarball)
	work := t.TempDir()
	at, ct, err := Artifact(context.Background(), tarball, work)
	if err != nil {
		t.Fatal(err)
	}
	if ct.Source != filepath.Base(tarball) {
		t.Errorf("source %q", ct.Source)
	}
	ap, cp, _ := builtPrefix(t)
	// The same tree: the same layer blob; only the config's source differs.
	if at.Layers[0].Desc.Digest != ap.Layers[0].Desc.Digest {
		t.Errorf("tarball layer %s, prefix layer %s", at.Layers[0].Desc.Digest, ap.Layers[0].Desc.Digest)
	}
	cp.Source = ct.Source
	if b, _ := cp.Canonical(); string(b) != string(at.Config) {
		t.Error("configs differ beyond the source")
	}
	at2, _, err := Artifact(context.Background(), tarball, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if m1, _, _ := at.Manifest(); true {
		m2, _, _ := at2.Manifest()
		if string(m1) != string(m2) {
			t.Error("two builds of one tarball differ")
		}
	}
}

// TestArtifactNamedByBytes: two prefixes of one version, one byte apart, have two trees,
// two keys, two tags and two digests; probing and packing write nothing into either.
func TestArtifactNamedByBytes(t *testing.T) {
	ctx := context.Background()
	src := debianPrefix(t)
	_, c1, d1 := builtPrefix(t)
	other := filepath.Join(t.TempDir(), "python")
	if err := cloneTree(src, other); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(other, "lib", "python3.11", "sitecustomize.py")
	if err := os.WriteFile(site, []byte("# a local change\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := oci.TreeDigest(ctx, other, oci.TarTreeOptions{AllowSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	_, c2, d2 := build(t, other)
	if c2.Version != c1.Version || !slices.Equal(c2.Tags, c1.Tags) {
		t.Fatalf("the copy probes as %s, the original as %s", c2.Version, c1.Version)
	}
	if b, err := Compile(ctx, other, t.TempDir()); err != nil {
		t.Fatal(err)
	} else if tree, err := oci.TreeDigest(ctx, b.Dir, oci.TarTreeOptions{AllowSymlinks: true}); err != nil || c2.Tree != tree.String() {
		t.Errorf("config tree %s, the compiled prefix digests to %s (%v)", c2.Tree, tree, err)
	}
	if after, err := oci.TreeDigest(ctx, other, oci.TarTreeOptions{AllowSymlinks: true}); err != nil || after != before {
		t.Errorf("building the artifact changed the prefix: %s before, %s after (%v)", before, after, err)
	}
	t1, _ := TagFor(c1)
	t2, _ := TagFor(c2)
	if c1.Tree == c2.Tree || t1 == t2 || d1.Digest == d2.Digest {
		t.Errorf("two prefixes of %s: trees %s %s, tags %s %s, digests %s %s; want all different", c1.Version, c1.Tree, c2.Tree, t1, t2, d1.Digest, d2.Digest)
	}
}

// cloneTree copies the tree at src to dst (which must not exist): directories,
// regular files with their modes, and symlinks.
func cloneTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(out, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, out)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, fi.Mode().Perm())
		}
	})
}

// TestPackMatchesArtifact: packing a prefix already probed gives exactly the artifact
// Artifact builds (which probes it itself); a config naming other bytes is refused.
func TestPackMatchesArtifact(t *testing.T) {
	_, c, d := builtPrefix(t)
	work := t.TempDir()
	b, err := Compile(context.Background(), debianPrefix(t), work)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Pack(context.Background(), b.Dir, c, work)
	if err != nil {
		t.Fatal(err)
	}
	_, got, err := a.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != d.Digest {
		t.Errorf("Pack gave %s, Artifact %s", got.Digest, d.Digest)
	}
	other := c
	other.Tree = "sha256:" + strings.Repeat("0", 64)
	if _, err := Pack(context.Background(), debianPrefix(t), other, t.TempDir()); err == nil || !strings.Contains(err.Error(), "changed while it was packed") {
		t.Errorf("a config of other bytes: %v", err)
	}
}
