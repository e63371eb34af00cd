//go:build unix

package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
)

// Pinned digests of the golden tree. They change when the tar or gzip bytes
// change: a new version of github.com/klauspost/compress (pinned in go.mod) moves
// goldenBlob only; goldenDiffID moving means the tar itself changed, which is a bug.
const (
	goldenDiffID = "sha256:cdce7c17693de6bdc523ccea6a594765187fe94aeb562da134723cc3705c76d5"
	goldenBlob   = "sha256:ef93696aa5b2ec9bf017df4de727251af6a37dc747a27429bd34a00d09001aaf"
)

var (
	longSplittable = "site-packages/" + strings.Repeat("d", 70) + "/" + strings.Repeat("f", 60) + ".py" // > 100, fits USTAR prefix+name
	longComponent  = "site-packages/pkg/" + strings.Repeat("x", 120) + ".txt"                           // needs PAX
	unicodeName    = "site-packages/pkg/naïve_日本.py"                                                    // needs PAX
)

type treeFile struct {
	name    string // slash-separated; trailing "/" for a directory
	mode    os.FileMode
	content string
}

// goldenTree lists the golden tree in an order that is not sorted, so that
// creation order cannot decide the tar order.
var goldenTree = []treeFile{
	{"site-packages/", 0o700, ""},
	{"site-packages/pkg/", 0o750, ""},
	{"site-packages/pkg/run.sh", 0o700, "#!/bin/sh\nexit 0\n"},
	{"site-packages/pkg/__init__.py", 0o600, "VERSION = '1.0'\n"},
	{"site-packages/pkg/empty.txt", 0o664, ""},
	{"site-packages/pkg/setuid", 0o4755, "s"},
	{"site-packages/empty/", 0o755, ""},
	{"site-packages/" + strings.Repeat("d", 70) + "/", 0o755, ""},
	{longSplittable, 0o644, "long"},
	{longComponent, 0o444, "component"},
	{unicodeName, 0o644, "ü = 1\n"},
	{"bin/", 0o755, ""},
	{"bin/tool", 0o750, "#!/opt/python/bin/python3\n"},
	{"site-packages/pkg.dist-info/", 0o755, ""},
	{"site-packages/pkg.dist-info/RECORD", 0o644, "pkg/__init__.py,,\n"},
	{"site-packages/a.pth", 0o644, "pkg\n"},
}

// makeTree creates goldenTree under a new temp dir. Variant 1 creates it in
// reverse order, under another umask, with other mtimes and another owner.
func makeTree(t *testing.T, variant int) string {
	t.Helper()
	dir := t.TempDir()
	files := append([]treeFile(nil), goldenTree...)
	if variant == 1 {
		old := syscall.Umask(0o077)
		defer syscall.Umask(old)
		// Parents first still, but siblings in another order.
		for i, j := 0, len(files)-1; i < j; i, j = i+1, j-1 {
			files[i], files[j] = files[j], files[i]
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(f.name, "/")))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f.name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte(f.content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Modes and times last (a 0o444 file or 0o700 dir must not block creation).
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(f.name, "/")))
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		mtime := time.Date(2024, 5, 6, 7, 8, 9, 123, time.UTC)
		if variant == 1 {
			mtime = time.Now()
			if os.Geteuid() == 0 {
				if err := os.Lchown(p, 1234, 5678); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestTarTreeGolden(t *testing.T) {
	ctx := context.Background()
	var descs []string
	for variant := range 2 {
		dir := makeTree(t, variant)
		var buf bytes.Buffer
		desc, diffID, err := TarTree(ctx, dir, &buf)
		if err != nil {
			t.Fatalf("variant %d: TarTree: %v", variant, err)
		}
		if desc.MediaType != MediaTypeLayer || desc.Size != int64(buf.Len()) || desc.Digest != digest.FromBytes(buf.Bytes()) {
			t.Errorf("variant %d: descriptor %+v does not describe the %d bytes written", variant, desc, buf.Len())
		}
		zr, err := gzip.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if got := digest.FromBytes(raw); got != diffID {
			t.Errorf("variant %d: diffID %s, but the uncompressed tar hashes to %s", variant, diffID, got)
		}
		if string(diffID) != goldenDiffID {
			t.Errorf("variant %d: diffID (uncompressed tar):\n got  %s\n want %s", variant, diffID, goldenDiffID)
		}
		if td, err := TreeDigest(ctx, dir, TarTreeOptions{}); err != nil || td != diffID {
			t.Errorf("variant %d: TreeDigest = %s, %v; want the diffID %s", variant, td, err, diffID)
		}
		if string(desc.Digest) != goldenBlob {
			t.Errorf("variant %d: blob digest (gzip'd tar, level %d):\n got  %s\n want %s", variant, GzipLevel, desc.Digest, goldenBlob)
		}
		descs = append(descs, string(desc.Digest))
	}
	if descs[0] != descs[1] {
		t.Errorf("the same tree built twice gave different blobs: %s and %s", descs[0], descs[1])
	}
}

// goldenMembersBlob pins the blob of membersTree, whose tar spans three gzip members.
const goldenMembersBlob = "sha256:7edaeb9c54d6f92178fa9c0c584c1eda3394bc0e816a4454a03f869e8f8c9a11"

// membersTree is a tree whose tar is over twice GzipMember: 9 MiB of code-like text.
func membersTree(t *testing.T) string {
	dir := t.TempDir()
	var b bytes.Buffer
	for i := 0; b.Len() < 9<<20; i++ {
		fmt.Fprintf(&b, "def f%d(x):\n    return x * %d\n", i, i%97)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "site-packages/big"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "site-packages/big/code.py"), b.Bytes(), 0o644))
	must(os.WriteFile(filepath.Join(dir, "site-packages/big/__init__.py"), []byte("x = 1\n"), 0o644))
	return dir
}

// TestTarTreeMembers: a tar over GzipMember bytes is written as members of exactly
// GzipMember bytes each but the last, which every gzip reader reads as one stream, the
// same bytes from the same tree every time.
func TestTarTreeMembers(t *testing.T) {
	ctx := context.Background()
	var blobs []string
	for range 2 {
		var buf bytes.Buffer
		desc, diffID, err := TarTree(ctx, membersTree(t), &buf)
		if err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, string(desc.Digest))
		// Member by member.
		br := bytes.NewReader(buf.Bytes())
		zr, err := gzip.NewReader(br)
		if err != nil {
			t.Fatal(err)
		}
		var tarBytes []byte
		var sizes []int
		for {
			zr.Multistream(false)
			m, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if zr.Header.Name != "" || zr.Header.OS != 255 || !zr.Header.ModTime.IsZero() && zr.Header.ModTime.Unix() != 0 {
				t.Errorf("member %d: header %+v, want no name, no mtime, OS 255", len(sizes), zr.Header)
			}
			sizes = append(sizes, len(m))
			tarBytes = append(tarBytes, m...)
			if err := zr.Reset(br); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		want := (len(tarBytes) + GzipMember - 1) / GzipMember
		if len(sizes) != want || len(sizes) < 3 {
			t.Fatalf("%d members for %d bytes of tar, want %d", len(sizes), len(tarBytes), want)
		}
		for i, n := range sizes[:len(sizes)-1] {
			if n != GzipMember {
				t.Errorf("member %d inflates to %d bytes, want %d", i, n, GzipMember)
			}
		}
		if got := digest.FromBytes(tarBytes); got != diffID {
			t.Errorf("the members' tar hashes to %s, the diffID is %s", got, diffID)
		}
		// As one stream, as any reader of layers reads it.
		zr, err = gzip.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if whole, err := io.ReadAll(zr); err != nil || !bytes.Equal(whole, tarBytes) {
			t.Errorf("read as one stream: %d bytes, %v; want the members' %d", len(whole), err, len(tarBytes))
		}
	}
	if blobs[0] != blobs[1] || blobs[0] != goldenMembersBlob {
		t.Errorf("blobs of the same tree: %s and %s, want %s", blobs[0], blobs[1], goldenMembersBlob)
	}
}

func TestTarTreeHeaders(t *testing.T) {
	dir := makeTree(t, 1)
	var buf bytes.Buffer
	if _, _, err := TarTree(context.Background(), dir, &buf); err != nil {
		t.Fatal(err)
	}
	// gzip header: magic, deflate, no flags, mtime 0, XFL 0, OS 255.
	if want := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}; !bytes.Equal(buf.Bytes()[:10], want) {
		t.Errorf("gzip header % x, want % x", buf.Bytes()[:10], want)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || zr.Comment != "" || zr.Extra != nil || !zr.ModTime.IsZero() || zr.OS != 255 {
		t.Errorf("gzip header not normalized: %+v", zr.Header)
	}

	want := map[string]treeFile{}
	for _, f := range goldenTree {
		want[f.name] = f
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		f, ok := want[h.Name]
		if !ok {
			t.Errorf("unexpected entry %q", h.Name)
			continue
		}
		isDir := strings.HasSuffix(f.name, "/")
		wantMode, wantType, wantSize := int64(0o644), byte(tar.TypeReg), int64(len(f.content))
		if isDir || f.mode&0o111 != 0 {
			wantMode = 0o755
		}
		if isDir {
			wantType = tar.TypeDir
		}
		wantFormat := tar.FormatUSTAR
		var wantPAX map[string]string
		if h.Name == longComponent || h.Name == unicodeName {
			wantFormat = tar.FormatPAX
			wantPAX = map[string]string{"path": h.Name}
		}
		checks := []struct {
			field     string
			got, want any
		}{
			{"Typeflag", h.Typeflag, wantType},
			{"Mode", h.Mode, wantMode},
			{"Size", h.Size, wantSize},
			{"Uid", h.Uid, 0},
			{"Gid", h.Gid, 0},
			{"Uname", h.Uname, ""},
			{"Gname", h.Gname, ""},
			{"ModTime", h.ModTime.Unix(), int64(0)},
			{"ModTime ns", h.ModTime.Nanosecond(), 0},
			{"AccessTime", h.AccessTime.IsZero(), true},
			{"ChangeTime", h.ChangeTime.IsZero(), true},
			{"Linkname", h.Linkname, ""},
			{"Devmajor", h.Devmajor, int64(0)},
			{"Devminor", h.Devminor, int64(0)},
			{"Format", h.Format, wantFormat},
			{"PAXRecords", len(h.PAXRecords), len(wantPAX)},
			{"PAX path", h.PAXRecords["path"], wantPAX["path"]},
			{"Xattrs", len(h.Xattrs), 0}, //nolint:staticcheck // must be empty
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("%q: %s = %v, want %v", h.Name, c.field, c.got, c.want)
			}
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != f.content {
			t.Errorf("%q: content %q, want %q", h.Name, body, f.content)
		}
	}
	if len(names) != len(goldenTree) {
		t.Errorf("%d entries, want %d: %q", len(names), len(goldenTree), names)
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("entries not sorted bytewise: %q before %q", names[i-1], names[i])
		}
	}
}

func TestTarTreeRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) // creates the offending entry
		path  string                         // the path the error must name
	}{
		{"symlink", func(t *testing.T, dir string) {
			must(t, os.Symlink("target", filepath.Join(dir, "pkg", "link")))
		}, "pkg/link"},
		{"dangling symlink to outside", func(t *testing.T, dir string) {
			must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "pkg", "passwd")))
		}, "pkg/passwd"},
		{"symlinked directory", func(t *testing.T, dir string) {
			must(t, os.Symlink(".", filepath.Join(dir, "pkg", "loop")))
		}, "pkg/loop"},
		{"fifo", func(t *testing.T, dir string) {
			must(t, syscall.Mkfifo(filepath.Join(dir, "pkg", "fifo"), 0o644))
		}, "pkg/fifo"},
		{"socket", func(t *testing.T, dir string) {
			ln, err := net.Listen("unix", filepath.Join(dir, "pkg", "sock"))
			must(t, err)
			t.Cleanup(func() { ln.Close() })
		}, "pkg/sock"},
		{"invalid UTF-8 name", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "pkg", "bad\xff.py"), nil, 0o644))
		}, "pkg/bad\xff.py"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(dir, "pkg"), 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "pkg", "ok.py"), []byte("x"), 0o644))
			tt.setup(t, dir)
			_, _, err := TarTree(context.Background(), dir, io.Discard)
			if !errors.Is(err, ErrUnsupportedFile) {
				t.Fatalf("TarTree = %v, want ErrUnsupportedFile", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.path)) {
				t.Errorf("error %q does not name %q", err, tt.path)
			}
		})
	}
}

func TestTarTreeErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := TarTree(ctx, makeTree(t, 0), io.Discard); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
	if _, _, err := TarTree(context.Background(), filepath.Join(t.TempDir(), "missing"), io.Discard); err == nil {
		t.Error("missing root: no error")
	}
	// An empty tree is a valid (empty) tar.
	var buf bytes.Buffer
	if _, _, err := TarTree(context.Background(), t.TempDir(), &buf); err != nil {
		t.Errorf("empty tree: %v", err)
	}
}
