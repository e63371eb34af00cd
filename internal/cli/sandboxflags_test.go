//go:build !lean

package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSessionCache: a session's cache is a directory of its own under the host
// cache, the same for every run of that session, another for another session;
// --cache-dir wins; without either, no cache.
func TestSessionCache(t *testing.T) {
	root := t.TempDir()
	var f sandboxFlags
	a1, err := f.cache(root, "ses_a")
	if err != nil {
		t.Fatal(err)
	}
	if a1 != filepath.Join(root, "sessions", "ses_a", "cache") {
		t.Errorf("cache of ses_a = %s", a1)
	}
	if fi, err := os.Stat(a1); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache of ses_a: %v, %v", fi, err)
	}
	if err := os.WriteFile(filepath.Join(a1, "kept"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := f.cache(root, "ses_a")
	if err != nil || again != a1 {
		t.Fatalf("second run of ses_a: %s, %v; want %s", again, err, a1)
	}
	if _, err := os.Stat(filepath.Join(again, "kept")); err != nil {
		t.Errorf("the second run lost what the first cached: %v", err)
	}
	b, err := f.cache(root, "ses_b")
	if err != nil || b == a1 {
		t.Fatalf("cache of ses_b = %s, %v: want one of its own", b, err)
	}
	if none, err := f.cache(root, ""); err != nil || none != "" {
		t.Errorf("no session: cache %q, %v; want none", none, err)
	}
	for _, bad := range []string{"../x", "a/b", "..", ".", "a b"} {
		if d, err := f.cache(root, bad); err == nil {
			t.Errorf("session %q: cache %s, want an error", bad, d)
		}
	}
	explicit := t.TempDir()
	f.cacheDir = explicit
	if d, err := f.cache(root, "ses_a"); err != nil || d != explicit {
		t.Errorf("--cache-dir: cache %s, %v; want %s", d, err, explicit)
	}
	f.cacheDir = filepath.Join(explicit, "missing")
	if _, err := f.cache(root, ""); err == nil {
		t.Error("--cache-dir of a missing directory: no error")
	}
}
