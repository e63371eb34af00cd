package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/pylayer/pylayer/oci/digest"
)

// TestFilesVersions: an install lists every file with the XXH64 of its
// content (version 2), as the one-shot reference function computes it; a
// version 1 list (sha256, written by earlier releases) still parses, and doctor
// checks its trees with sha256; a change of content that keeps the size is
// reported under either version.
func TestFilesVersions(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	fx := artifact(t, "k", wheelA)
	installAll(t, c, s, fx)
	hex0 := fx.layers[0].Digest.Encoded()
	tree := c.treeDir(hex0)
	recs, err := c.readFiles(hex0)
	must(t, err)
	b, err := os.ReadFile(c.treeFiles(hex0))
	must(t, err)
	var m filesManifest
	must(t, jsonUnmarshal(b, &m))
	if m.Version != 2 {
		t.Fatalf("the file list is version %d, want 2", m.Version)
	}
	files := 0
	for _, r := range recs {
		if r.Dir {
			continue
		}
		files++
		content, err := os.ReadFile(filepath.Join(tree, r.Path))
		must(t, err)
		want := fmt.Sprintf("%016x", xxhash.Sum64(content))
		if r.XXH64 != want || r.SHA256 != "" || r.Size != int64(len(content)) {
			t.Errorf("%s: recorded xxh64 %q sha256 %q size %d; want xxh64 %s of %d bytes", r.Path, r.XXH64, r.SHA256, r.Size, want, len(content))
		}
	}
	if files != len(wheelA.files) {
		t.Fatalf("%d files listed, want %d", files, len(wheelA.files))
	}

	// The same list as version 1 wrote it.
	v1 := append([]record(nil), recs...)
	for i, r := range v1 {
		if !r.Dir {
			content, err := os.ReadFile(filepath.Join(tree, r.Path))
			must(t, err)
			sum := sha256.Sum256(content)
			v1[i].XXH64, v1[i].SHA256 = "", hex.EncodeToString(sum[:])
		}
	}
	list := jsonMarshal(t, filesManifest{Version: 1, Blob: string(fx.layers[0].Digest), Entries: ptrs(v1)})
	if _, err := parseFiles(list, fx.layers[0].Digest); err != nil {
		t.Fatalf("a version 1 list: %v", err)
	}
	replaceList := func(b []byte) {
		p := c.treeFiles(hex0)
		must(t, os.Chmod(filepath.Dir(p), 0o755))
		must(t, os.Remove(p))
		must(t, os.WriteFile(p, b, 0o444))
		must(t, os.Chmod(filepath.Dir(p), 0o555))
	}
	for _, version := range []int{1, 2} {
		if version == 1 {
			replaceList(list)
		}
		rep, err := c.Doctor(ctx, false)
		must(t, err)
		if len(rep.Bad) != 0 {
			t.Fatalf("version %d: a healthy cache has problems: %q", version, rep.Bad)
		}
	}
	// Same size, other content: only the hash can tell.
	p := filepath.Join(tree, "site-packages/a/__init__.py")
	must(t, os.Chmod(p, 0o644))
	must(t, os.WriteFile(p, []byte("print('b')\n"), 0o644))
	must(t, os.Chmod(p, 0o444))
	rep, err := c.Doctor(ctx, false)
	must(t, err)
	if got := strings.Join(rep.Bad, "\n"); !strings.Contains(got, "site-packages/a/__init__.py: content changed") || !strings.Contains(got, "sha256") {
		t.Errorf("version 1: the changed file is not reported by its sha256: %q", rep.Bad)
	}
	replaceList(b) // version 2 again
	rep, err = c.Doctor(ctx, false)
	must(t, err)
	if got := strings.Join(rep.Bad, "\n"); !strings.Contains(got, "site-packages/a/__init__.py: content changed") || !strings.Contains(got, "xxh64") {
		t.Errorf("version 2: the changed file is not reported by its xxh64: %q", rep.Bad)
	}
}

// TestParseFilesHashes: each version takes its own hash only.
func TestParseFilesHashes(t *testing.T) {
	blob := digest.FromString("blob")
	x := strings.Repeat("ab", 8)
	sha := strings.Repeat("cd", 32)
	for _, tc := range []struct {
		name    string
		version int
		file    record
		ok      bool
	}{
		{"v2 xxh64", 2, record{XXH64: x}, true},
		{"v1 sha256", 1, record{SHA256: sha}, true},
		{"v2 sha256", 2, record{SHA256: sha}, false},
		{"v1 xxh64", 1, record{XXH64: x}, false},
		{"v2 both", 2, record{XXH64: x, SHA256: sha}, false},
		{"v2 none", 2, record{}, false},
		{"v2 short", 2, record{XXH64: x[:14]}, false},
		{"v2 upper case", 2, record{XXH64: strings.ToUpper(x)}, false},
		{"v3", 3, record{XXH64: x}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.file
			f.Path, f.Mode, f.Size = "a", modeFile, 1
			_, err := parseFiles(jsonMarshal(t, filesManifest{Version: tc.version, Blob: string(blob), Entries: []*record{&f}}), blob)
			if (err == nil) != tc.ok {
				t.Errorf("parseFiles: %v, want ok %v", err, tc.ok)
			}
		})
	}
	// A directory or a symlink has no hash under either name.
	for _, r := range []record{{Path: "d", Dir: true, Mode: modeDir, XXH64: x}, {Path: "l", Mode: modeLink, Link: "x", XXH64: x}} {
		r := r
		if _, err := parseFiles(jsonMarshal(t, filesManifest{Version: 2, Blob: string(blob), Entries: []*record{&r}}), blob); err == nil {
			t.Errorf("%s with a hash was accepted", r.Path)
		}
	}
}

func ptrs(recs []record) []*record {
	out := make([]*record, len(recs))
	for i := range recs {
		out[i] = &recs[i]
	}
	return out
}
