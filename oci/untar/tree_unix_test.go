//go:build unix

package untar

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestExtractUmask: files get their exact mode whatever the umask: created with
// it when the umask leaves it whole, set by fchmod when the umask would narrow it
// or cannot be read.
func TestExtractUmask(t *testing.T) {
	raw := rawTar(t, reg("a/f", "x"), exe("a/x", "#!"))
	for _, tc := range []struct {
		name  string
		mask  int
		known bool
	}{
		{"umask 022", 0o022, true},
		{"umask 077 narrows the modes", 0o077, true},
		{"umask 277 narrows even the owner's", 0o277, true},
		{"umask unknown", 0o077, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := syscall.Umask(tc.mask)
			oldFn := umask
			umask = func() (uint32, bool) { return uint32(tc.mask), tc.known }
			defer func() { syscall.Umask(old); umask = oldFn }()
			for _, ro := range []bool{false, true} {
				dst := filepath.Join(t.TempDir(), "root")
				if _, err := Extract(context.Background(), bytes.NewReader(raw), dst, Options{Limits: lim(), ReadOnly: ro}); err != nil {
					t.Fatal(err)
				}
				file, exec := fs.FileMode(0o644), fs.FileMode(0o755)
				if ro {
					file, exec = 0o444, 0o555
				}
				for p, want := range map[string]fs.FileMode{"a/f": file, "a/x": exec} {
					fi, err := os.Lstat(filepath.Join(dst, p))
					if err != nil || fi.Mode() != want {
						t.Errorf("ReadOnly=%v: %s: mode %v, %v; want %v", ro, p, fi.Mode(), err, want)
					}
				}
			}
		})
	}
	if u, ok := umask(); ok && u > 0o777 {
		t.Errorf("umask() = %#o, not a mode mask", u)
	}
}
