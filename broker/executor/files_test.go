package executor

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/sandbox"
)

func read(t *testing.T, h *harness, s broker.Session, p string) (string, error) {
	t.Helper()
	f, _, err := h.m.OpenFile(context.Background(), s, p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), nil
}

func TestFilesInAndOut(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	ctx := context.Background()
	fi, err := h.m.PutFile(ctx, s, "data/in.csv", strings.NewReader("a,b\n1,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Name != "in.csv" || fi.Path != "data/in.csv" || fi.Size != 8 || fi.Type != broker.FileRegular {
		t.Errorf("PutFile: %+v", fi)
	}
	if got, err := read(t, h, s, "/data/in.csv"); err != nil || got != "a,b\n1,2\n" {
		t.Fatalf("read back: %q, %v", got, err)
	}
	if b, err := os.ReadFile(filepath.Join(h.root, "ses_a", "data", "in.csv")); err != nil || string(b) != "a,b\n1,2\n" {
		t.Fatalf("not in the workspace: %q, %v", b, err)
	}
	os.Symlink("in.csv", filepath.Join(h.root, "ses_a", "data", "link"))
	ls, err := h.m.ListFiles(ctx, s, "data")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Name != "in.csv" || ls[1].Name != "link" || ls[1].Type != broker.FileSymlink || ls[1].Path != "data/link" {
		t.Fatalf("ListFiles(data): %+v", ls)
	}
	if got, err := read(t, h, s, "data/link"); err != nil || got != "a,b\n1,2\n" {
		t.Errorf("a link inside the workspace: %q, %v", got, err)
	}
	top, err := h.m.ListFiles(ctx, s, "")
	if err != nil || len(top) != 1 || top[0].Type != broker.FileDir {
		t.Fatalf("ListFiles(\"\"): %+v, %v", top, err)
	}
	// replace: the new content, whole
	if _, err := h.m.PutFile(ctx, s, "data/in.csv", strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, h, s, "data/in.csv"); got != "new" {
		t.Errorf("after a replace: %q", got)
	}
	if err := h.m.DeleteFile(ctx, s, "data"); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("deleting a directory that is not empty: %v, want ErrInvalid", err)
	}
	for _, p := range []string{"data/link", "data/in.csv", "data"} {
		if err := h.m.DeleteFile(ctx, s, p); err != nil {
			t.Fatalf("delete %s: %v", p, err)
		}
	}
	if err := h.m.DeleteFile(ctx, s, "data"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("deleting a missing file: %v, want ErrNotFound", err)
	}
	if _, err := read(t, h, s, "nope"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("reading a missing file: %v, want ErrNotFound", err)
	}
	if _, err := h.m.ListFiles(ctx, s, "nope"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("listing a missing directory: %v, want ErrNotFound", err)
	}
}

func TestFilesConfined(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	ctx := context.Background()
	if _, err := h.m.ListFiles(ctx, s, ""); err != nil { // makes the workspace
		t.Fatal(err)
	}
	ws := filepath.Join(h.root, "ses_a")
	secret := filepath.Join(h.root, "secret")
	os.WriteFile(secret, []byte("host"), 0o600)
	os.Symlink("/", filepath.Join(ws, "x"))
	os.Symlink(secret, filepath.Join(ws, "abs"))
	os.Symlink("../secret", filepath.Join(ws, "rel"))
	os.Symlink("../ses_b", filepath.Join(ws, "other"))
	os.Mkdir(filepath.Join(ws, "d"), 0o755)
	for _, p := range []string{"x/etc/passwd", "abs", "rel", "other/f", "d/../../secret", "../secret", "..", "a/../b"} {
		if got, err := read(t, h, s, p); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("reading %s: %q, %v; want ErrInvalid", p, got, err)
		} else if strings.Contains(err.Error(), h.root) {
			t.Errorf("reading %s: the error names a host path: %v", p, err)
		}
		if p == "abs" || p == "rel" {
			continue // writing replaces the link itself: below
		}
		if _, err := h.m.PutFile(ctx, s, p, strings.NewReader("pwned")); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("writing %s: %v; want ErrInvalid", p, err)
		}
	}
	for _, d := range []string{"x", "x/etc", "..", "rel"} {
		if ls, err := h.m.ListFiles(ctx, s, d); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("listing %s: %d entries, %v; want ErrInvalid", d, len(ls), err)
		}
	}
	if _, err := h.m.PutFile(ctx, s, "x/tmp/pwned", strings.NewReader("pwned")); err == nil {
		t.Error("writing through a link to / succeeded")
	}
	// deleting a link removes the link, not what it names
	if err := h.m.DeleteFile(ctx, s, "abs"); err != nil {
		t.Fatal(err)
	}
	// writing a link replaces the link, not what it names
	if fi, err := h.m.PutFile(ctx, s, "rel", strings.NewReader("mine")); err != nil || fi.Type != broker.FileRegular {
		t.Fatalf("writing over a link: %+v, %v", fi, err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "host" {
		t.Errorf("the host file was changed: %q", b)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("deleting the link removed its target: %v", err)
	}
	if _, _, err := h.m.OpenFile(ctx, s, "d"); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("reading a directory: %v, want ErrInvalid", err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.m.OpenFile(ctx, s, "fifo"); !errors.Is(err, broker.ErrInvalid) { // and does not block
		t.Errorf("reading a FIFO: %v, want ErrInvalid", err)
	}
	if _, err := h.m.PutFile(ctx, broker.Session{ID: ".cache"}, "f", strings.NewReader("x")); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("session .cache: %v, want ErrInvalid", err)
	}
}

// failingReader gives some bytes, then an error: a body cut off.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("connection reset")
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

func TestPutSizeCapAndAtomic(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxFile = 10 })
	s := h.session("ses_a")
	ctx := context.Background()
	if _, err := h.m.PutFile(ctx, s, "f", strings.NewReader("0123456789")); err != nil {
		t.Fatalf("a file of exactly MaxFile: %v", err)
	}
	if _, err := h.m.PutFile(ctx, s, "f", strings.NewReader("0123456789A")); !errors.Is(err, broker.ErrTooLarge) {
		t.Fatalf("a file past MaxFile: %v, want ErrTooLarge", err)
	}
	if _, err := h.m.PutFile(ctx, s, "g", strings.NewReader("0123456789A")); !errors.Is(err, broker.ErrTooLarge) {
		t.Fatalf("a new file past MaxFile: %v, want ErrTooLarge", err)
	}
	if _, err := h.m.PutFile(ctx, s, "f", &failingReader{n: 5}); err == nil {
		t.Fatal("a body cut off is not an error")
	}
	if got, _ := read(t, h, s, "f"); got != "0123456789" {
		t.Errorf("the old file after failed writes: %q", got)
	}
	ents, _ := os.ReadDir(filepath.Join(h.root, "ses_a"))
	if len(ents) != 1 || ents[0].Name() != "f" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the workspace holds %v, want [f]: a failed write left something", names)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := h.m.PutFile(cctx, s, "f", strings.NewReader("new")); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled write: %v", err)
	}
	if _, err := h.m.PutFile(ctx, s, tempPrefix+"x", strings.NewReader("x")); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("a name of pylayer's temporary files: %v, want ErrInvalid", err)
	}
}

// TestFilesHandedToSandboxUser: run as root, what PutFile makes is the sandbox user's,
// so the session can change it.
func TestFilesHandedToSandboxUser(t *testing.T) {
	want := sandbox.Identity{UID: os.Geteuid(), GID: os.Getegid()}
	if want.UID == 0 {
		want = sandbox.Identity{UID: 4242, GID: 4343}
	}
	h := newHarness(t, func(o *Options) {
		o.hostIdentity = func(context.Context, string) (sandbox.Identity, error) { return want, nil }
	})
	s := h.session("ses_a")
	if _, err := h.m.PutFile(context.Background(), s, "a/b/c.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "a", "a/b", "a/b/c.txt"} {
		fi, err := os.Lstat(filepath.Join(h.root, "ses_a", p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != want.UID || int(st.Gid) != want.GID {
			t.Errorf("%q is %d:%d, want %d:%d", p, st.Uid, st.Gid, want.UID, want.GID)
		}
	}
	fi, _ := os.Stat(filepath.Join(h.root, cacheDir))
	if fi.Mode().Perm() != 0o711 {
		t.Errorf("the sessions' caches' directory is %v, want 0711", fi.Mode().Perm())
	}
}

// TestFilesBadNames: what the file system refuses of a path is the client's error (400),
// not the host's (a 500 whose cause only the host's log has), and a PUT onto a symbolic
// link replaces the link, never what it points to.
func TestFilesBadNames(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	ctx := context.Background()
	long := strings.Repeat("é", 200) // 400 bytes: past NAME_MAX
	if _, err := h.m.PutFile(ctx, s, long, strings.NewReader("x")); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "255") {
		t.Errorf("PUT of a 400-byte name: %v, want ErrInvalid naming the 255-byte limit", err)
	}
	if _, err := h.m.PutFile(ctx, s, "dir/"+long+"/f", strings.NewReader("x")); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("PUT under a 400-byte directory name: %v, want ErrInvalid", err)
	}
	if _, _, err := h.m.OpenFile(ctx, s, long); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("GET of a 400-byte name: %v, want ErrInvalid", err)
	}
	if _, err := h.m.PutFile(ctx, s, "d/f", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.PutFile(ctx, s, "d", strings.NewReader("x")); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "directory") {
		t.Errorf("PUT onto a directory: %v, want ErrInvalid saying it is a directory", err)
	}
	if _, err := h.m.PutFile(ctx, s, "d/f/g", strings.NewReader("x")); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("PUT under a file: %v, want ErrInvalid", err)
	}
	if _, err := h.m.PutFile(ctx, s, "ünï/☃.txt", strings.NewReader("snow")); err != nil {
		t.Errorf("PUT of a unicode name: %v", err)
	}
	ws := filepath.Join(h.root, "ses_a")
	if err := os.Symlink("d/f", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.PutFile(ctx, s, "link", strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "link")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("PUT onto a link: %v %v, want the link replaced by a file", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "d", "f")); string(b) != "x" {
		t.Errorf("PUT onto a link changed its target: %q", b)
	}
}

// TestListFilesCap: a directory of more entries than a listing holds is refused with
// what to do, not cut at an arbitrary subset of its names.
func TestListFilesCap(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	ctx := context.Background()
	if _, err := h.m.PutFile(ctx, s, "big/0", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.root, "ses_a", "big")
	for i := 1; i <= maxList; i++ {
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if l, err := h.m.ListFiles(ctx, s, "big"); !errors.Is(err, broker.ErrTooLarge) || !strings.Contains(err.Error(), "shell") {
		t.Fatalf("ListFiles of %d entries: %d listed, %v; want ErrTooLarge with a hint", maxList+1, len(l), err)
	}
	if err := os.Remove(filepath.Join(dir, "0")); err != nil {
		t.Fatal(err)
	}
	if l, err := h.m.ListFiles(ctx, s, "big"); err != nil || len(l) != maxList {
		t.Fatalf("ListFiles of %d entries: %d, %v", maxList, len(l), err)
	}
}
