package wheel

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/test/fixture"
)

func FuzzParseFilename(f *testing.F) {
	for _, s := range []string{
		"pip-23.0.1-py3-none-any.whl", "six-1.16.0-py2.py3-none-any.whl", "x-1-1a-cp39.cp310-abi3-linux_x86_64.whl",
		"numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "a-b-c-d-e-f-g.whl", "--.whl", "a-1-..-b-c.whl",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fn, err := ParseFilename(s)
		if err != nil {
			if !errors.Is(err, ErrBadFilename) {
				t.Fatalf("error %v is not ErrBadFilename", err)
			}
			return
		}
		if fn.String() != s {
			t.Fatalf("String() = %q, want %q", fn.String(), s)
		}
		if strings.ContainsAny(s, "/\\\x00 ") || fn.Name == "" || fn.Version == "" || fn.Project() == "" {
			t.Fatalf("accepted %q as %+v", s, fn)
		}
		if n := len(fn.TagTriples()); n == 0 || n > len(fn.Python)*len(fn.ABI)*len(fn.Platform) {
			t.Fatalf("%d tag triples", n)
		}
		if again, err := ParseFilename(fn.String()); err != nil || again.String() != s {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzParseMetadata(f *testing.F) {
	for _, c := range metadataCases()[:25] {
		f.Add([]byte(c))
	}
	f.Add(fixture.Wheel{Name: "x", Version: "1", RequiresDist: []string{"a"}, ProvidesExtra: []string{"e"}}.Metadata())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMetadata(b)
		if err != nil {
			if !errors.Is(err, ErrBadMetadata) {
				t.Fatalf("error %v is not ErrBadMetadata", err)
			}
			return
		}
		if m.Name == "" || m.Version == "" {
			t.Fatalf("accepted %+v", m)
		}
	})
}

// fuzzWheels are seeds for FuzzInstall, all named f-1.0.
func fuzzWheels() []fixture.Wheel {
	return []fixture.Wheel{
		{Name: "f", Version: "1.0"},
		{Name: "f", Version: "1.0", EntryPoints: "[console_scripts]\nf = f:main\n[gui_scripts]\ng = f.x:y.z [e]\n", Files: []fixture.File{
			{Path: "f/__init__.py", Data: []byte("x")}, {Path: "f/bin.so", Data: []byte("\x7fELF"), Mode: 0o755},
			{Path: "f-1.0.data/scripts/s", Data: []byte("#!python\nx\n")}, {Path: "f-1.0.data/headers/h.h", Data: []byte("h")},
			{Path: "f-1.0.data/data/d/e", Data: []byte("d")}, {Path: "f-1.0.data/purelib/p.py", Data: []byte("p")},
		}},
		{Name: "f", Version: "1.0", Files: []fixture.File{{Path: "../x", Data: []byte("x")}}},
		{Name: "f", Version: "1.0", Files: []fixture.File{{Path: "f/l", Data: []byte("/etc/passwd"), Mode: fs.ModeSymlink | 0o777}}},
	}
}

func FuzzInstall(f *testing.F) {
	for _, w := range fuzzWheels() {
		b, err := w.Bytes()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		whl := filepath.Join(dir, "in", "f-1.0-py3-none-any.whl")
		if err := os.MkdirAll(filepath.Dir(whl), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(whl, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		dest := filepath.Join(out, "tree")
		// NoSync: what this target checks is where files go, not that they are durable,
		// and a syncfs per input would flush the whole file system the fuzzer writes on.
		// TrustedBytes: libdeflate (with -tags libdeflate) reads the members too.
		_, err := Install(context.Background(), whl, dest, InstallOptions{MaxTotalBytes: 4 << 20, MaxFileBytes: 1 << 20, MaxFiles: 2000, NoSync: true, TrustedBytes: true})
		// Nothing may appear outside dest, and nothing at all on error.
		var seen []string
		err2 := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == dir || p == filepath.Dir(whl) || p == whl || p == out {
				return nil
			}
			if d.Type()&fs.ModeSymlink != 0 || !d.Type().IsRegular() && !d.IsDir() {
				t.Errorf("special file %s", p)
			}
			seen = append(seen, p)
			return nil
		})
		if err2 != nil {
			t.Fatal(err2)
		}
		for _, p := range seen {
			if err != nil || p != dest && !strings.HasPrefix(p, dest+string(filepath.Separator)) {
				t.Fatalf("install error %v; left %s", err, p)
			}
		}
	})
}
