package builder

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/layers/build"
)

// An upload enters the wheelhouse as a link to the broker's one copy, and leaves it when
// the broker forgets it.
func TestUploadLinkedAndForgotten(t *testing.T) {
	dir := t.TempDir()
	w := &Worker{cfg: Config{Trees: &build.Builder{Root: filepath.Join(dir, "cache")}}}
	src := filepath.Join(dir, "data", "up.whl")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("wheel bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := broker.Upload{Filename: "up-1.0-py3-none-any.whl", SHA256: "ab12", Path: src}
	dst := w.uploadPath(u.SHA256, u.Filename)
	for range 2 { // linking again replaces the link
		if err := linkFile(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.Stat(src)
	b, err := os.Stat(dst)
	if err != nil || !os.SameFile(a, b) {
		t.Fatalf("the wheelhouse entry is not the upload itself: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".link-*")); len(m) != 0 {
		t.Errorf("temporary links left: %v", m)
	}
	if err := w.ForgetUpload(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Dir(dst)); !os.IsNotExist(err) {
		t.Errorf("after ForgetUpload the wheelhouse keeps %s: %v", filepath.Dir(dst), err)
	}
	if err := w.ForgetUpload(context.Background(), broker.Upload{Filename: "../x.whl", SHA256: "ab12"}); err == nil {
		t.Error("ForgetUpload took a path for a file name")
	}
}
