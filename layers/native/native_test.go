package native

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// hostLib returns the path of a shared library of the host, failing the test when
// none of the usual directories has it.
func hostLib(t testing.TB, name string) string {
	t.Helper()
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	t.Fatalf("no %s on this host (looked in the usual library directories); the tests read real host libraries", name)
	return ""
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// setRunpath rewrites the ELF64 file at p so that its DT_SONAME entry becomes a
// DT_RUNPATH of runpath, written over the longest string of .dynstr (a symbol name
// nothing here reads): what patchelf --set-rpath does, without the tool and without
// moving anything.
func setRunpath(t testing.TB, p, runpath string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if ef.Class != elf.ELFCLASS64 || ef.ByteOrder != binary.LittleEndian {
		t.Fatalf("%s: setRunpath handles little-endian ELF64 only", p)
	}
	dyn, str := ef.SectionByType(elf.SHT_DYNAMIC), ef.Section(".dynstr")
	if dyn == nil || str == nil {
		t.Fatalf("%s: no dynamic section", p)
	}
	strs := b[str.Offset : str.Offset+str.Size]
	best, bestLen := -1, 0
	for i := 0; i < len(strs); {
		n := bytes.IndexByte(strs[i:], 0)
		if n < 0 {
			break
		}
		if n > bestLen {
			best, bestLen = i, n
		}
		i += n + 1
	}
	if bestLen < len(runpath) {
		t.Fatalf("%s: no .dynstr string is long enough for %q", p, runpath)
	}
	copy(strs[best:], runpath)
	strs[best+len(runpath)] = 0
	patched := false
	for off := dyn.Offset; off+16 <= dyn.Offset+dyn.Size; off += 16 {
		tag := elf.DynTag(binary.LittleEndian.Uint64(b[off:]))
		if tag == elf.DT_SONAME || tag == elf.DT_RUNPATH || tag == elf.DT_RPATH {
			binary.LittleEndian.PutUint64(b[off:], uint64(elf.DT_RUNPATH))
			binary.LittleEndian.PutUint64(b[off+8:], uint64(best))
			patched = true
			break
		}
	}
	if !patched {
		t.Fatalf("%s: no DT_SONAME entry to turn into DT_RUNPATH", p)
	}
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestNeededHostLibrary(t *testing.T) {
	needed, runpath, err := Needed(hostLib(t, "libssl.so.3"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"libcrypto.so.3", "libc.so.6"} {
		if !slices.Contains(needed, want) {
			t.Errorf("Needed(libssl.so.3) = %q, want it to include %s", needed, want)
		}
	}
	if len(runpath) != 0 {
		t.Errorf("runpath of a Debian library = %q, want none", runpath)
	}
}

func TestNeededRunpath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "libssl.so.3")
	copyFile(t, hostLib(t, "libssl.so.3"), p)
	setRunpath(t, p, "$ORIGIN/../a.libs:/opt/x")
	needed, runpath, err := Needed(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"$ORIGIN/../a.libs", "/opt/x"}; !reflect.DeepEqual(runpath, want) {
		t.Errorf("runpath = %q, want %q", runpath, want)
	}
	if !slices.Contains(needed, "libcrypto.so.3") {
		t.Errorf("needed = %q, want libcrypto.so.3 among them", needed)
	}
}

func TestNeededNotELF(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"empty": "", "short": "\x7fE", "text": "#!/bin/sh\necho hi\n"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Needed(p); !errors.Is(err, ErrNotELF) {
			t.Errorf("Needed(%s) error = %v, want ErrNotELF", name, err)
		}
	}
	p := filepath.Join(dir, "trunc")
	b, err := os.ReadFile(hostLib(t, "libssl.so.3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b[:40], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Needed(p); !errors.Is(err, ErrMalformed) {
		t.Errorf("Needed(truncated ELF) error = %v, want ErrMalformed", err)
	}
	if _, _, err := Needed(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Needed(absent) error = %v, want ErrNotExist", err)
	}
}

func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		platform, soname string
		want             bool
	}{
		{"manylinux_2_28_x86_64", "libc.so.6", true},
		{"manylinux_2_28_x86_64", "libstdc++.so.6", true},
		{"manylinux_2_28_x86_64", "libz.so.1", true},
		{"manylinux_2_28_x86_64", "libmvec.so.1", true},
		{"manylinux_2_28_x86_64", "libexpat.so.1", true},
		{"manylinux_2_28_x86_64", "ld-linux-x86-64.so.2", true},
		{"manylinux_2_28_x86_64", "libblas.so.3", false},
		{"manylinux_2_28_x86_64", "libcrypto.so.3", false},
		{"manylinux_2_28_x86_64", "libpython3.11.so.1.0", false},
		{"manylinux_2_17_x86_64", "libmvec.so.1", false},
		{"manylinux_2_17", "libexpat.so.1", true},
		{"manylinux2014_aarch64", "libexpat.so.1", true},
		{"manylinux2010_x86_64", "libexpat.so.1", true},
		{"manylinux1_x86_64", "libexpat.so.1", false},
		{"manylinux_2_5_x86_64", "libX11.so.6", true},
		{"manylinux_2_24_x86_64", "libmvec.so.1", true},
		{"musllinux_1_2_x86_64", "libc.so", true},
		{"musllinux_1_2_x86_64", "libz.so.1", true},
		{"musllinux_1_1_aarch64", "ld-musl-aarch64.so.1", true},
		{"musllinux_1_2_x86_64", "libc.so.6", false},
		{"musllinux_1_2_x86_64", "libstdc++.so.6", false},
		{"linux_x86_64", "libmvec.so.1", true},
		{"linux_x86_64", "libblas.so.3", false},
		{"win_amd64", "libc.so.6", false},
		{"manylinux_3_1_x86_64", "libc.so.6", false},
		{"manylinux_2_x86_64", "libc.so.6", false},
		{"", "libc.so.6", false},
	} {
		if got := Allowed(c.platform, c.soname); got != c.want {
			t.Errorf("Allowed(%q, %q) = %v, want %v", c.platform, c.soname, got, c.want)
		}
	}
}

func TestPolicyName(t *testing.T) {
	for in, want := range map[string]string{
		"manylinux_2_28_x86_64": "manylinux_2_28",
		"manylinux2014_x86_64":  "manylinux_2_17",
		"musllinux_1_2_aarch64": "musllinux_1_2",
		"linux_x86_64":          "manylinux",
		"any":                   "any",
	} {
		if got := PolicyName(in); got != want {
			t.Errorf("PolicyName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCheck builds wheel-like trees from host libraries: libssl needs libcrypto,
// which only a vendored copy in pkg.libs reached through an $ORIGIN run path provides.
func TestCheck(t *testing.T) {
	ssl, crypto := hostLib(t, "libssl.so.3"), hostLib(t, "libcrypto.so.3")
	const platform = "manylinux_2_28_x86_64"
	tree := func(t *testing.T, runpath string, vendor bool) string {
		root := t.TempDir()
		ext := filepath.Join(root, "site-packages", "pkg", "sub", "_ext.so")
		copyFile(t, ssl, ext)
		if runpath != "" {
			setRunpath(t, ext, runpath)
		}
		if vendor {
			copyFile(t, crypto, filepath.Join(root, "site-packages", "pkg.libs", "libcrypto.so.3"))
		}
		if err := os.WriteFile(filepath.Join(root, "site-packages", "pkg", "__init__.py"), []byte("\x7fELF but not really"), 0o644); err != nil {
			t.Fatal(err)
		}
		return root
	}
	for _, c := range []struct {
		name    string
		runpath string
		vendor  bool
		missing []string
	}{
		{"vendored", "$ORIGIN/../../pkg.libs", true, nil},
		{"braced origin", "${ORIGIN}/../../pkg.libs", true, nil},
		{"no runpath", "", true, []string{"libcrypto.so.3"}},
		{"not vendored", "$ORIGIN/../../pkg.libs", false, []string{"libcrypto.so.3"}},
		{"absolute", "/usr/lib/x86_64-linux-gnu", true, []string{"libcrypto.so.3"}},
		{"outside the tree", "$ORIGIN/../../../../lib", true, []string{"libcrypto.so.3"}},
		{"other token", "$ORIGIN/../../$LIB", true, []string{"libcrypto.so.3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := tree(t, c.runpath, c.vendor)
			r, err := Check(context.Background(), root, platform)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Sonames(); !slices.Equal(got, c.missing) {
				t.Fatalf("missing = %q, want %q (report %+v)", got, c.missing, r)
			}
			wantELF := 1
			if c.vendor {
				wantELF = 2 // the vendored libcrypto is read too and needs only libc
			}
			if r.ELF != wantELF {
				t.Errorf("ELF files read = %d, want %d", r.ELF, wantELF)
			}
			if want := []string{"site-packages/pkg/__init__.py"}; !slices.Equal(r.Malformed, want) {
				t.Errorf("malformed = %q, want %q", r.Malformed, want)
			}
			if c.missing == nil {
				if s := r.Summary(); s != "" {
					t.Errorf("summary = %q, want none", s)
				}
				return
			}
			if want := []string{"site-packages/pkg/sub/_ext.so"}; !slices.Equal(r.Missing[0].Files, want) {
				t.Errorf("files = %q, want %q", r.Missing[0].Files, want)
			}
			want := "needs libcrypto.so.3 (by site-packages/pkg/sub/_ext.so), which is neither in the wheel nor on the manylinux_2_28 allow-list"
			if s := r.Summary(); s != want {
				t.Errorf("summary = %q\nwant      %q", s, want)
			}
		})
	}
}

func TestCheckCanceled(t *testing.T) {
	root := t.TempDir()
	copyFile(t, hostLib(t, "libssl.so.3"), filepath.Join(root, "a.so"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Check(ctx, root, "manylinux_2_28_x86_64"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Check(canceled) error = %v, want context.Canceled", err)
	}
}

func TestSummaryMany(t *testing.T) {
	r := &Report{Platform: "manylinux_2_28_x86_64", Missing: []Missing{
		{Soname: "libblas.so.3", Files: []string{"a.so", "b.so"}},
		{Soname: "liblapack.so.3", Files: []string{"a.so"}},
	}}
	s := r.Summary()
	for _, want := range []string{"libblas.so.3 (by a.so and 1 more)", "liblapack.so.3 (by a.so)", "which are neither", "manylinux_2_28 allow-list"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
}
