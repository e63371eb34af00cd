package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestCompat: run and ensure refuse a layer locked for another Python (3.12) or another
// platform (aarch64) on the cp311 x86_64 interpreter, and an ext layer without its base,
// with an error naming both sides; what fits runs. The interpreter's prefix is
// byte-identical before and after publishing it, building layers with it and running.
func TestCompat(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := newHost(t)
	repo := "oci:" + filepath.Join(sharedDir(t), "repo")
	priv, pub := h.keygen(ctx, t, "ci")
	trust := []string{"--trust", pub}
	prefix := pythonPrefix(t)
	before := treeSums(t, prefix)

	py := publishInterpreter(ctx, t, h, repo, priv)
	fooURL := fooIndex(t)
	dir := sharedDir(t)
	lockFoo := func(name string, extra ...string) string {
		t.Helper()
		out := filepath.Join(dir, name+".lock.json")
		if r := run(ctx, t, dir, lockArgs(fooURL, out, []string{"foo==1.0"}, extra...)...); r.code != 0 {
			t.Fatalf("pylayer lock foo==1.0 %v: exit %d\n%s", extra, r.code, r.stderr)
		}
		return out
	}
	publishFoo := func(lock string, extra ...string) published {
		t.Helper()
		var p published
		out := h.must(ctx, t, append([]string{"publish", lock, "--repo", repo, "--key", priv, "--index-url", fooURL, "--json"}, extra...)...)
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("pylayer publish --json: %v", err)
		}
		return p
	}
	base := h.publish(ctx, t, locks(t)["office"], repo, priv, "--interpreter", prefix)
	ext := publishFoo(lockFoo("ext", "--kind", "ext", "-c", locks(t)["office"]), "--interpreter", prefix)
	other := publishFoo(lockFoo("other"), "--interpreter", prefix)
	py312 := publishFoo(lockFoo("py312", "--python", "3.12")) // a cp311 interpreter cannot compile its .pyc
	arm := publishFoo(lockFoo("arm", "--platform", "manylinux_2_28_aarch64"), "--interpreter", prefix)

	runOn := func(layers ...string) []string {
		args := append([]string{"run"}, trust...)
		args = append(args, "--python", py.Ref)
		for _, l := range layers {
			args = append(args, "--layer", l)
		}
		return append(args, "--", "python3", "-c", "import foo, docx; print(foo.__version__)")
	}

	t.Run("what fits runs", func(t *testing.T) {
		if out := h.must(ctx, t, runOn(base.Ref, ext.Ref)...); out != "1.0" {
			t.Errorf("foo.__version__ = %q, want 1.0", out)
		}
	})

	for _, c := range []struct {
		name   string
		layers []string
		says   []string
	}{
		{"a layer locked for CPython 3.12", []string{py312.Ref}, []string{py312.Ref, "CPython 3.12", py.Ref, "CPython 3.11.2", "cp311"}},
		{"a layer locked for aarch64", []string{arm.Ref}, []string{arm.Ref, "manylinux_2_28_aarch64", py.Ref, "x86_64"}},
		{"an ext layer without its base", []string{ext.Ref}, []string{ext.Ref, "needs base", "without a base layer"}},
		{"an ext layer on another base", []string{other.Ref, ext.Ref}, []string{ext.Ref, "needs base", other.Ref}},
	} {
		t.Run("run refuses "+c.name, func(t *testing.T) {
			e := h.refuse(ctx, t, runOn(c.layers...)...)
			for _, s := range c.says {
				if !strings.Contains(e, s) {
					t.Errorf("the refusal does not say %q:\n%s", s, e)
				}
			}
		})
	}

	t.Run("publish refuses to compile a 3.12 lock with a 3.11 interpreter", func(t *testing.T) {
		e := h.refuse(ctx, t, "publish", filepath.Join(dir, "py312.lock.json"), "--repo", repo, "--key", priv, "--index-url", fooURL, "--interpreter", prefix)
		if !strings.Contains(e, "cpython-311") || !strings.Contains(e, "3.12") {
			t.Errorf("the refusal does not name both sides:\n%s", e)
		}
	})

	t.Run("ensure reports a base that does not fit", func(t *testing.T) {
		out := h.must(ctx, t, append([]string{"--json", "ensure", "--python", py.Ref, "--base", py312.Ref}, trust...)...)
		var rep ensureJSON
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("pylayer ensure --json printed %q: %v", out, err)
		}
		if rep.OK || rep.Base == nil || rep.Base.OK || !strings.Contains(rep.Base.Error, "CPython 3.12") ||
			!strings.Contains(rep.Base.Error, py.Ref) || rep.Python == nil || !rep.Python.OK {
			t.Errorf("ensure --base %s = %s\nwant ok false and the base refused naming both sides", py312.Ref, out)
		}
	})

	// Publishing the prefix, compiling .pyc with it (--interpreter) and running on it wrote
	// nothing into it.
	if after := treeSums(t, prefix); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("the prefix changed: %d entries before, %d after; first difference: %s", len(before), len(after), firstDiff(before, after))
	}
}

// treeSums lists every path under root with its type, mode and content (sha256) or link.
func treeSums(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := rel + " " + fi.Mode().String()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + l
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + " / " + b[i]
		}
	}
	if len(a) > len(b) {
		return "missing after: " + a[len(b)]
	}
	if len(b) > len(a) {
		return "new after: " + b[len(a)]
	}
	return "none"
}
