package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// sessionScript runs in each sandbox: it waits until the other session is running too (a
// rendezvous through the shared workspace), then reports foo's version, where foo and docx
// come from, and every distribution importlib.metadata finds in the layers.
const sessionScript = `
import importlib.metadata as md, json, os, sys, time
me, other = sys.argv[1], sys.argv[2]
open(f"/workspace/{me}.ready", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(f"/workspace/{other}.ready"):
    if time.monotonic() > deadline:
        sys.exit(f"session {other} never started while {me} ran")
    time.sleep(0.02)
import foo, docx
dists = [[d.metadata["Name"], d.version, str(d._path)] for d in md.distributions()
         if str(getattr(d, "_path", "")).startswith("/opt/pylayer/layers/")]
print(json.dumps({"foo": foo.__version__, "foo_file": foo.__file__, "docx_file": docx.__file__, "dists": dists}))
`

type sessionReport struct {
	Foo      string      `json:"foo"`
	FooFile  string      `json:"foo_file"`
	DocxFile string      `json:"docx_file"`
	Dists    [][3]string `json:"dists"`
}

// TestRunConcurrentSessions publishes a base and two ext layers (foo 1.0, foo 2.0) to a real
// registry and runs two sessions at the same time on one host with a cold cache, one on
// base+ext1, the other on base+ext2: each sees its own foo, the base's docx, and exactly the
// distributions of its two locks; both mount the same base, whose cached root still hashes
// to its digest afterwards.
func TestRunConcurrentSessions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := registrytest.Start(t, registrytest.Options{})
	ci := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	s := publishStack(ctx, t, ci, r.Ref("team/pylayer"), "--ca-file", r.CAFile)

	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	ws := sharedDir(t)
	reg := []string{"--trust", s.pub, "--ca-file", r.CAFile}
	sessions := []struct {
		name, other, version string
		ext                  published
		extLock              string
	}{
		{"a", "b", "1.0", s.ext1, s.ext1Lock},
		{"b", "a", "2.0", s.ext2, s.ext2Lock},
	}
	results := make([]result, len(sessions))
	var wg sync.WaitGroup
	for i, se := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.run(ctx, t, append(append([]string{"run"}, reg...),
				"--layer", s.base.Ref, "--layer", se.ext.Ref, "--workspace", ws, "--timeout", "2m",
				"--", "python3", "-c", sessionScript, se.name, se.other)...)
		}()
	}
	wg.Wait()

	baseSet := lockSet(t, s.baseLock)
	for i, se := range sessions {
		res := results[i]
		if res.code != 0 {
			t.Errorf("session %s (base + foo %s): exit %d\nstdout:\n%s\nstderr:\n%s", se.name, se.version, res.code, res.stdout, res.stderr)
			continue
		}
		var rep sessionReport
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
			t.Errorf("session %s printed %q: %v", se.name, res.stdout, err)
			continue
		}
		if rep.Foo != se.version || !strings.HasPrefix(rep.FooFile, "/opt/pylayer/layers/1-ext/") {
			t.Errorf("session %s imported foo %s from %s, want %s from /opt/pylayer/layers/1-ext/", se.name, rep.Foo, rep.FooFile, se.version)
		}
		if !strings.HasPrefix(rep.DocxFile, "/opt/pylayer/layers/0-base/") {
			t.Errorf("session %s imported docx from %s, want the base layer", se.name, rep.DocxFile)
		}
		// importlib.metadata sees each distribution of the two locks once, in its own layer.
		want := map[string]string{}
		for _, nv := range baseSet {
			want[nv] = "/opt/pylayer/layers/0-base/site-packages/"
		}
		for _, nv := range lockSet(t, se.extLock) {
			want[nv] = "/opt/pylayer/layers/1-ext/site-packages/"
		}
		seen := map[string]bool{}
		for _, d := range rep.Dists {
			nv := fixture.NormalizeName(d[0]) + "==" + d[1]
			switch dir, ok := want[nv]; {
			case seen[nv]:
				t.Errorf("session %s: importlib.metadata lists %s twice", se.name, nv)
			case !ok:
				t.Errorf("session %s: importlib.metadata lists %s (%s), which neither lock has", se.name, nv, d[2])
			case !strings.HasPrefix(d[2], dir):
				t.Errorf("session %s: %s is installed at %s, want under %s", se.name, nv, d[2], dir)
			}
			seen[nv] = true
		}
		for nv := range want {
			if !seen[nv] {
				t.Errorf("session %s: importlib.metadata does not list %s of the locks", se.name, nv)
			}
		}
	}

	// Both sessions mount the one cached base, named by its digest, and the ext of their own.
	baseRoot := filepath.Join(h.cache, "layers", "sha256", strings.TrimPrefix(s.base.Digest, "sha256:"))
	for _, se := range sessions {
		a := h.printArgv(ctx, t, append(reg, "--layer", s.base.Ref, "--layer", se.ext.Ref)...)
		if got := mountSource(a.Argv, "/opt/pylayer/layers/0-base"); got != baseRoot {
			t.Errorf("session %s mounts %q as its base, want %s", se.name, got, baseRoot)
		}
		extRoot := filepath.Join(h.cache, "layers", "sha256", strings.TrimPrefix(se.ext.Digest, "sha256:"))
		if got := mountSource(a.Argv, "/opt/pylayer/layers/1-ext"); got != extRoot {
			t.Errorf("session %s mounts %q as its ext, want %s", se.name, got, extRoot)
		}
	}
	// The base root is still the artifact of its digest: its manifest hashes to the digest,
	// its lock to the layer's key (the key of its tag, base-<key>: the lock as built, with
	// the interpreter that compiled its .pyc), and a snapshot taken now survives another session untouched.
	for file, want := range map[string]string{"manifest.json": s.base.Digest, "lock.json": "sha256:" + strings.TrimPrefix(s.base.Tag, "base-")} {
		b, err := os.ReadFile(filepath.Join(baseRoot, ".pylayer", file))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != want {
			t.Errorf("cached base %s hashes to %x after the sessions, want %s", file, sum, want)
		}
	}
	before := snapshot(t, baseRoot)
	res := h.run(ctx, t, append(append([]string{"run"}, reg...), "--layer", s.base.Ref, "--layer", s.ext2.Ref, "--",
		"sh", "-c", "touch /opt/pylayer/layers/0-base/site-packages/docx/__init__.py; echo x > /opt/pylayer/layers/0-base/new; true")...)
	if res.code != 0 {
		t.Fatalf("a third session: exit %d\n%s", res.code, res.stderr)
	}
	if d := diffSnapshots(before, snapshot(t, baseRoot)); len(d) > 0 {
		t.Errorf("a session changed the cached base:\n%s", strings.Join(d, "\n"))
	}
	if e := cacheEntries(t, h.cache, "layers"); len(e) != 3 {
		t.Errorf("the cache holds layers %v, want the base and the two ext layers", e)
	}
}
