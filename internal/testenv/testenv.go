// Package testenv is test support for the two test tiers, as containerd keeps them:
//
//   - `make unit` runs `go test -short`: the fast tier. It needs nothing but Go and the
//     machine's python3 (the pip oracle), installs nothing and needs no root.
//   - `make test` runs everything, after `make deps` has installed what the integration
//     tests use: Debian's bwrap, docker-registry, pip, chromium and the .deb files that the
//     fixtures repack (see DebCache), the stock cosign and crane (Tools), axe-core.
//
// A test that needs any of those calls Integration first. Under -short it is skipped with a
// message saying so; otherwise it runs, and a missing tool makes it fail, never skip: the
// tools are installed by `make deps`, never from inside `go test`.
//
// It is test support: import it only from _test.go files and test/ commands. It imports
// nothing of pylayer.
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// Integration skips t in the -short tier: it needs what `make deps` installs (named by
// needs, e.g. "bwrap" or "Debian's .deb files").
func Integration(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("integration test (needs %s): not in the -short tier; `make test` runs it", needs)
	}
}

// CacheDir is pylayer's per-user cache root for test and build tooling:
// $HOME/.cache/pylayer (or the OS temp dir without a home).
func CacheDir() string {
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".cache", "pylayer")
	}
	return filepath.Join(os.TempDir(), "pylayer-cache")
}

// Tools is where `make tools` and `make deps` put the stock peer tools (cosign, crane) and
// axe-core: $PYLAYER_TOOLS, else CacheDir()/tools.
func Tools() string {
	if d := os.Getenv("PYLAYER_TOOLS"); d != "" {
		return d
	}
	return filepath.Join(CacheDir(), "tools")
}

// SharedDir is a fresh directory (t.TempDir, mode 0755, in a parent of mode 0755) that
// other users can enter: when the tests run as root, sessions run as an unprivileged
// sandbox user, and bwrap binds the cache, layers and workspaces as that user.
func SharedDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{d, filepath.Dir(d)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
