package fsx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, content := range []string{"one", "two, longer"} {
		if err := WriteFile(ctx, p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != content {
			t.Fatalf("read %q, %v; want %q", b, err, content)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
			t.Errorf("mode %v, want 0640 whatever the umask", fi.Mode())
		}
		if n := names(t, dir); len(n) != 1 {
			t.Errorf("directory holds %v, want only f", n)
		}
	}
	// The temporary file may live elsewhere on the same file system.
	tmp := t.TempDir()
	if err := WriteFileIn(ctx, tmp, p, []byte("three"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := names(t, tmp); len(n) != 0 {
		t.Errorf("tmp dir keeps %v", n)
	}
	// A missing directory is an error naming the path, and leaves nothing.
	err := WriteFile(ctx, filepath.Join(dir, "no", "f"), nil, 0o644)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "no", "f")) {
		t.Errorf("WriteFile into a missing directory: %v", err)
	}
}

func TestPendingCleanup(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	must(t, os.WriteFile(p, []byte("old"), 0o644))

	// Abandoned: the old file stays, the temporary file goes.
	w, err := Create(ctx, p, 0o644)
	must(t, err)
	if !strings.HasPrefix(filepath.Base(w.Name()), TempPrefix) {
		t.Errorf("temporary file %q lacks %q", w.Name(), TempPrefix)
	}
	w.Write([]byte("new"))
	w.Cleanup()
	w.Cleanup()
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("abandoned write changed the file to %q", b)
	}
	if n := names(t, dir); len(n) != 1 {
		t.Errorf("abandoned write left %v", n)
	}

	// Cancelled before Commit: nothing published, nothing left.
	cctx, cancel := context.WithCancel(ctx)
	w, err = Create(cctx, p, 0o644)
	must(t, err)
	w.Write([]byte("new"))
	cancel()
	if err := w.Commit(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit after cancel = %v, want context.Canceled", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("cancelled write changed the file to %q", b)
	}
	if n := names(t, dir); len(n) != 1 {
		t.Errorf("cancelled write left %v", n)
	}
	if _, err := Create(cctx, p, 0o644); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a done context = %v", err)
	}

	// Committed twice: the second is an error, the first stays.
	w, err = Create(ctx, p, 0o644)
	must(t, err)
	w.Write([]byte("new"))
	must(t, w.Commit(ctx))
	w.Cleanup() // after Commit: must not remove the result
	if err := w.Commit(ctx); err == nil {
		t.Error("a second Commit succeeded")
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("committed file holds %q", b)
	}
}

func TestCommitAs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w, err := Create(ctx, filepath.Join(dir, "unnamed"), 0o600)
	must(t, err)
	defer w.Cleanup()
	w.Write([]byte("content"))
	must(t, w.CommitAs(ctx, filepath.Join(dir, "sha256-of-content")))
	if n := names(t, dir); len(n) != 1 || n[0] != "sha256-of-content" {
		t.Errorf("directory holds %v, want only the committed name", n)
	}
}

func TestCreateFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	created, err := CreateFile(ctx, p, []byte("first"), 0o644)
	if err != nil || !created {
		t.Fatalf("CreateFile = %v, %v", created, err)
	}
	created, err = CreateFile(ctx, p, []byte("second"), 0o644)
	if err != nil || created {
		t.Fatalf("second CreateFile = %v, %v; want false, nil", created, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "first" {
		t.Errorf("file replaced: %q", b)
	}
	// The race CreateFile guards against: the path appears between its check and its link.
	w, err := Create(ctx, filepath.Join(dir, "g"), 0o644)
	must(t, err)
	w.Write([]byte("late"))
	must(t, os.WriteFile(filepath.Join(dir, "g"), []byte("early"), 0o644))
	if err := w.CommitNew(ctx); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CommitNew over an existing file = %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "g")); string(b) != "early" {
		t.Errorf("CommitNew replaced the file: %q", b)
	}
	if n := names(t, dir); len(n) != 2 {
		t.Errorf("directory holds %v, want f and g", n)
	}
}

func TestSync(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	must(t, SyncDir(ctx, dir))
	must(t, SyncFS(ctx, dir))
	if err := SyncDir(ctx, filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncDir of a missing directory = %v", err)
	}
	if err := SyncFS(ctx, filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncFS of a missing directory = %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := SyncDir(cctx, dir); !errors.Is(err, context.Canceled) {
		t.Errorf("SyncDir with a done context = %v", err)
	}
}

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

func TestReader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src := &closeCounter{Reader: bytes.NewReader(bytes.Repeat([]byte("x"), 100))}
	rc := ReadCloser(ctx, src)
	buf := make([]byte, 10)
	if n, err := rc.Read(buf); n != 10 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	cancel()
	if _, err := rc.Read(buf); !errors.Is(err, context.Canceled) {
		t.Errorf("Read after cancel = %v, want context.Canceled", err)
	}
	if _, err := io.ReadAll(Reader(ctx, strings.NewReader("y"))); !errors.Is(err, context.Canceled) {
		t.Errorf("Reader with a done context: %v", err)
	}
	must(t, rc.Close())
	if src.closed != 1 {
		t.Errorf("Close closed the source %d times", src.closed)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
