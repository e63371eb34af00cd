package index

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/internal/testenv"
)

// python3 returns the oracle interpreter; tests fail (never skip) without it.
func python3(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/root/.pyenv/shims/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("python3 (the pip oracle) is not installed")
	return ""
}

// pipEnv isolates pip from the user's configuration and the network.
func pipEnv(t *testing.T) []string {
	home := t.TempDir()
	return append(os.Environ(),
		"HOME="+home,
		"PIP_CONFIG_FILE=/dev/null",
		"PIP_NO_CACHE_DIR=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_INPUT=1",
		"PIP_EXTRA_INDEX_URL=",
		"PIP_FIND_LINKS=",
		"NETRC="+filepath.Join(home, "no-netrc"),
	)
}

// TestPipAcceptsServer runs pip download against our server: pip must pick
// the newest non-yanked wheel, honour Requires-Python and take a yanked
// wheel only when pinned exactly (PEP 592), over HTML and over JSON.
func TestPipAcceptsServer(t *testing.T) {
	py := python3(t)
	dir := t.TempDir()
	for _, w := range []wheelSpec{
		{name: "demo_pkg", version: "1.0"},
		{name: "demo_pkg", version: "2.0"}, // yanked below
		{name: "rp_pkg", version: "1.0"},
		{name: "rp_pkg", version: "2.0", requiresPython: ">=3.9"},
	} {
		writeWheel(t, dir, w)
	}
	if err := os.WriteFile(filepath.Join(dir, "demo_pkg-2.0-py3-none-any.whl.yanked"), []byte("bad release\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"skips yanked", []string{"Demo.Pkg"}, "demo_pkg-1.0-py3-none-any.whl"},
		{"yanked when pinned", []string{"demo-pkg==2.0"}, "demo_pkg-2.0-py3-none-any.whl"},
		{"requires-python 3.8", []string{"--python-version", "3.8", "rp-pkg"}, "rp_pkg-1.0-py3-none-any.whl"},
		{"requires-python 3.11", []string{"--python-version", "3.11", "rp-pkg"}, "rp_pkg-2.0-py3-none-any.whl"},
	}
	for _, json := range []bool{true, false} {
		srv, err := NewServer(dir, WithJSON(json))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var pageTypes []string
		sawMetadata := false
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			srv.ServeHTTP(w, r)
			mu.Lock()
			defer mu.Unlock()
			if strings.HasPrefix(r.URL.Path, "/simple/") {
				pageTypes = append(pageTypes, w.Header().Get("Content-Type"))
			}
			sawMetadata = sawMetadata || strings.HasSuffix(r.URL.Path, ".metadata")
		}))
		for _, tc := range cases {
			t.Run(map[bool]string{true: "json/", false: "html/"}[json]+tc.name, func(t *testing.T) {
				dest := t.TempDir()
				args := append([]string{"-m", "pip", "download", "--no-deps", "--only-binary=:all:",
					"--dest", dest, "--index-url", ts.URL + "/simple/"}, tc.args...)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, py, args...)
				cmd.Env = pipEnv(t)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("pip %v: %v\n%s", tc.args, err, out)
				}
				entries, _ := os.ReadDir(dest)
				var got []string
				for _, e := range entries {
					got = append(got, e.Name())
				}
				sort.Strings(got)
				if strings.Join(got, ",") != tc.want {
					t.Fatalf("pip downloaded %v, want %s\n%s", got, tc.want, out)
				}
			})
		}
		ts.Close()
		srv.Close()
		want := map[bool]string{true: mediaJSON, false: mediaHTML}[json]
		for _, ct := range pageTypes {
			if !strings.HasPrefix(ct, want) {
				t.Errorf("pip was served %q, want %s", ct, want)
			}
		}
		if len(pageTypes) == 0 || !sawMetadata {
			t.Errorf("pip fetched %d pages, PEP 658 metadata fetched: %v", len(pageTypes), sawMetadata)
		}
	}
}

// TestDebianPipAcceptsJSON: Debian bookworm's pip 23.0.1 crashes on a PEP 691 page whose
// "dist-info-metadata" is a dict (the bug behind PEP 714), so the server must not send it.
func TestDebianPipAcceptsJSON(t *testing.T) {
	testenv.Integration(t, "Debian's pip (python3-pip)")
	const debianPython = "/usr/bin/python3.11"
	if _, err := os.Stat("/usr/lib/python3/dist-packages/pip"); err != nil {
		t.Fatalf("Debian's pip is needed for this test: run `make deps` (apt-get install python3-pip): %v", err)
	}
	dir := t.TempDir()
	writeWheel(t, dir, wheelSpec{name: "demo_pkg", version: "1.0"})
	srv, err := NewServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	dest := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, debianPython, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
		"--dest", dest, "--index-url", ts.URL+"/simple/", "demo-pkg")
	cmd.Env = pipEnv(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Debian's pip failed against our index: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dest, "demo_pkg-1.0-py3-none-any.whl")); err != nil {
		t.Fatal(err)
	}
}
