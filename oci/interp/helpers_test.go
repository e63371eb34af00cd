package interp

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/internal/testenv"
	"github.com/pylayer/pylayer/test/fixture"
)

// The Debian python prefix, made once, on first use, by the tests that need it (the
// integration tier: it reads the .deb files `make deps` downloads).
var (
	prefixDir     string
	prefixDirOnce sync.Once
	prefixDirErr  error
	prefixTmp     string
)

func debianPrefix(t testing.TB) string {
	t.Helper()
	testenv.Integration(t, "Debian's python3.11 .deb files")
	prefixDirOnce.Do(func() {
		prefixTmp, prefixDirErr = os.MkdirTemp("", "pylayer-interp-test-*")
		if prefixDirErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		prefixDir, prefixDirErr = fixture.DebianPython(ctx, fixture.DebCache(), filepath.Join(prefixTmp, "python"))
	})
	if prefixDirErr != nil {
		t.Fatalf("making the Debian python prefix: %v", prefixDirErr)
	}
	return prefixDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{prefixTmp, prefixWork} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// tarEnt is one entry of a test tarball.
type tarEnt struct {
	name string
	typ  byte
	mode int64
	body string
	link string
}

func mkTarGz(t testing.TB, ents []tarEnt) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range ents {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: mode, Linkname: e.link, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tarballOf packs the tree at dir as an install_only tarball (top dir python/) in
// directory order, as python-build-standalone does, not sorted.
func tarballOf(t testing.TB, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := filepath.ToSlash(filepath.Join(TopDir, rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = name
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

// listTree lists every path under root with its type ("/" dir, "@target" link).
func listTree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.IsDir():
			rel += "/"
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			rel += "@" + l
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// blobEntries lists a gzip'd tar blob: "name", "name -> link".
func blobEntries(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		e := h.Name
		if h.Typeflag == tar.TypeSymlink {
			e += " -> " + h.Linkname
		}
		out = append(out, e)
	}
}

// rawTar is mkTarGz without the gzip layer, for fuzz seeds.
func rawTar(t testing.TB, ents []tarEnt) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(mkTarGz(t, ents)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gz(t testing.TB, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	return buf.Bytes()
}
