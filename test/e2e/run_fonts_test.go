package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

// greetWheel ships a console script, greet, that prints where it runs from.
var greetWheel = fixture.Wheel{Name: "greet", Version: "1.0",
	EntryPoints: "[console_scripts]\ngreet = greet:main\n",
	Files: []fixture.File{{Path: "greet/__init__.py", Data: []byte(
		"import sys\ndef main():\n    print('greet', sys.executable, sys.argv[0])\n")}}}

// TestRunFontsScriptsCache runs, in real bwrap sandboxes on the interpreter artifact
// and a base holding a console script: fontconfig finds DejaVu Sans with no error
// (the host's /etc/fonts, read-only), the layer's console script runs by name (its
// shebang is the interpreter's), a headless matplotlib backend is named, and a
// --cache-dir keeps what one run cached for the next.
func TestRunFontsScriptsCache(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := newHost(t)
	idx := sharedDir(t)
	bkWrite(t, idx, greetWheel)
	url := serveIndex(t, idx)
	lock := filepath.Join(h.home, "greet.lock.json")
	h.must(ctx, t, lockArgs(url, lock, []string{"greet"})...)
	repo := "oci:" + filepath.Join(sharedDir(t), "repo")
	priv, pub := h.keygen(ctx, t, "ci")
	var base published
	if err := json.Unmarshal([]byte(h.must(ctx, t, "publish", lock, "--repo", repo, "--key", priv, "--index-url", url, "--json")), &base); err != nil {
		t.Fatal(err)
	}
	py := publishInterpreter(ctx, t, h, repo, priv)
	on := []string{"run", "--trust", pub, "--python", py.Ref, "--layer", base.Ref}

	t.Run("fonts", func(t *testing.T) {
		r := h.run(ctx, t, append(on, "--", "sh", "-c", "fc-match 'DejaVu Sans'; fc-list : family")...)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		if first := strings.SplitN(r.stdout, "\n", 2)[0]; !strings.Contains(first, `"DejaVu Sans"`) {
			t.Errorf("fc-match 'DejaVu Sans' = %q, want DejaVu Sans", first)
		}
		if !strings.Contains(r.stdout, "DejaVu Sans") {
			t.Errorf("fc-list finds no DejaVu Sans:\n%s", r.stdout)
		}
		if strings.Contains(r.stderr, "Fontconfig") {
			t.Errorf("fontconfig complains:\n%s", r.stderr)
		}
	})

	t.Run("console script by name", func(t *testing.T) {
		for _, mode := range [][]string{on, {"run", "--trust", pub, "--layer", base.Ref}} {
			r := h.run(ctx, t, append(mode, "--", "greet")...)
			if r.code != 0 {
				t.Fatalf("%q: greet: exit %d\n%s", mode, r.code, r.stderr)
			}
			if f := strings.Fields(r.stdout); len(f) != 3 || f[0] != "greet" || f[2] != "/opt/pylayer/layers/0-base/bin/greet" ||
				!strings.HasPrefix(f[1], "/opt/python/bin/python3") && !strings.HasPrefix(f[1], "/usr/bin/python3") {
				t.Errorf("%q: greet printed %q, want greet, the interpreter, the base's bin/greet", mode, r.stdout)
			}
		}
		r := h.run(ctx, t, append(on, "--", "sh", "-c", "command -v pip; echo $MPLBACKEND")...)
		if got := strings.Fields(r.stdout); r.code != 0 || len(got) != 2 || got[0] != "/opt/pylayer/bin/pip" || got[1] != "Agg" {
			t.Errorf("pip, MPLBACKEND = %q (exit %d), want the shim, Agg\n%s", r.stdout, r.code, r.stderr)
		}
	})

	t.Run("cache persists across runs, per directory", func(t *testing.T) {
		c1, c2 := filepath.Join(sharedDir(t), "c1"), filepath.Join(sharedDir(t), "c2")
		for _, d := range []string{c1, c2} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		const write = `import os; d = os.environ["MPLCONFIGDIR"]; os.makedirs(d, exist_ok=True); open(d + "/fontlist.json", "w").write("one")`
		const read = `import os; p = os.environ["MPLCONFIGDIR"] + "/fontlist.json"; print(open(p).read() if os.path.exists(p) else "none")`
		h.must(ctx, t, append(on, "--cache-dir", c1, "--", "python3", "-c", write)...)
		if got := h.must(ctx, t, append(on, "--cache-dir", c1, "--", "python3", "-c", read)...); strings.TrimSpace(got) != "one" {
			t.Errorf("second run of one cache reads %q, want what the first wrote", got)
		}
		if got := h.must(ctx, t, append(on, "--cache-dir", c2, "--", "python3", "-c", read)...); strings.TrimSpace(got) != "none" {
			t.Errorf("another cache reads %q, want nothing", got)
		}
		if got := h.must(ctx, t, append(on, "--", "python3", "-c", read)...); strings.TrimSpace(got) != "none" {
			t.Errorf("a run without a cache reads %q, want nothing", got)
		}
	})
}

// TestRunSessionCache: pylayer run --session keeps one cache per session under the host
// cache: what a run of a session caches, the next run of it finds, and another session
// never does.
func TestRunSessionCache(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := newBkDeploy(ctx, t, false)
	s1, s2 := d.serve.newSession(t, d.owner), d.serve.newSession(t, d.owner)
	const write = `import os; open(os.environ["XDG_CACHE_HOME"] + "/mark", "w").write("s1")`
	const read = `import os; p = os.environ["XDG_CACHE_HOME"] + "/mark"; print(open(p).read() if os.path.exists(p) else "none")`
	d.runSession(ctx, t, s1.ID, write)
	if got := d.runSession(ctx, t, s1.ID, read); strings.TrimSpace(got) != "s1" {
		t.Errorf("second run of session 1 reads %q, want what its first wrote", got)
	}
	if got := d.runSession(ctx, t, s2.ID, read); strings.TrimSpace(got) != "none" {
		t.Errorf("session 2 reads %q from its cache, want nothing of session 1's", got)
	}
	for _, id := range []string{s1.ID, s2.ID} {
		if fi, err := os.Stat(filepath.Join(d.h.cache, "sessions", id, "cache")); err != nil || !fi.IsDir() {
			t.Errorf("session %s: no cache directory under the host cache: %v", id, err)
		}
	}
}
