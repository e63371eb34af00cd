package index

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// TestClientAgainstServer lists, fetches metadata and downloads from our own
// server, over HTML and over JSON.
func TestClientAgainstServer(t *testing.T) {
	dir := t.TempDir()
	old := wheelSpec{name: "Demo_Pkg", version: "1.0"}
	newer := wheelSpec{name: "demo_pkg", version: "2.0", requiresPython: ">=3.9,<4"}
	bad := wheelSpec{name: "demo_pkg", version: "3.0"}
	wheels := map[string][]byte{}
	for _, w := range []wheelSpec{old, newer, bad} {
		wheels[w.filename()] = writeWheel(t, dir, w)
	}
	if err := os.WriteFile(filepath.Join(dir, bad.filename()+".yanked"), []byte(" broken <build>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sdist := []byte("not really a tarball")
	if err := os.WriteFile(filepath.Join(dir, "demo-pkg-0.9.tar.gz"), sdist, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, json := range []bool{false, true} {
		name := map[bool]string{false: "html", true: "json"}[json]
		t.Run(name, func(t *testing.T) {
			srv, err := NewServer(dir, WithJSON(json))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			ts := httptest.NewServer(srv)
			defer ts.Close()
			c, err := New(ts.URL+"/simple", WithNetrc(""))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			files, err := c.Files(ctx, "DEMO.pkg")
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != 4 {
				t.Fatalf("got %d files, want 4: %+v", len(files), files)
			}
			byName := map[string]File{}
			for _, f := range files {
				byName[f.Filename] = f
				if f.Project != "demo-pkg" {
					t.Errorf("%s: project %q", f.Filename, f.Project)
				}
			}
			sd := byName["demo-pkg-0.9.tar.gz"]
			if sd.SHA256 != sha256Hex(sdist) || sd.HasMetadata {
				t.Errorf("sdist: %+v", sd)
			}
			for _, w := range []wheelSpec{old, newer, bad} {
				f, ok := byName[w.filename()]
				if !ok {
					t.Fatalf("%s not listed", w.filename())
				}
				want := wheels[w.filename()]
				if f.SHA256 != sha256Hex(want) {
					t.Errorf("%s: sha256 %s", f.Filename, f.SHA256)
				}
				if json && f.Size != int64(len(want)) {
					t.Errorf("%s: size %d, want %d", f.Filename, f.Size, len(want))
				}
				if f.RequiresPython != w.requiresPython {
					t.Errorf("%s: requires-python %q, want %q", f.Filename, f.RequiresPython, w.requiresPython)
				}
				if f.Yanked != (w == bad) || (w == bad && f.YankedReason != "broken <build>") {
					t.Errorf("%s: yanked %v %q", f.Filename, f.Yanked, f.YankedReason)
				}
				if !f.HasMetadata || f.MetadataSHA256 != sha256Hex(w.metadata()) {
					t.Errorf("%s: metadata %v %q", f.Filename, f.HasMetadata, f.MetadataSHA256)
				}
				md, err := c.Metadata(ctx, f)
				if err != nil || !bytes.Equal(md, w.metadata()) {
					t.Errorf("%s: Metadata() = %q, %v", f.Filename, md, err)
				}
				// the wheel path of Metadata(): no PEP 658 file
				f2 := f
				f2.HasMetadata, f2.MetadataSHA256 = false, ""
				md, err = c.Metadata(ctx, f2)
				if err != nil || !bytes.Equal(md, w.metadata()) {
					t.Errorf("%s: Metadata() from wheel = %q, %v", f.Filename, md, err)
				}
				dst := filepath.Join(t.TempDir(), f.Filename)
				if err := c.Download(ctx, f, dst); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(dst)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s: downloaded bytes differ (%v)", f.Filename, err)
				}
			}
			if _, err := c.Files(ctx, "nope"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Files(nope) = %v, want ErrNotFound", err)
			}
		})
	}
}
