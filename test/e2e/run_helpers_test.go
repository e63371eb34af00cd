package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

// The helpers of the `pylayer run` suites (run_*_test.go): a second index with two
// versions of one tiny package, a base plus two ext layers published over it, the Debian
// CPython prefix, and a look at the host's processes.

var (
	prefixOnce sync.Once
	prefixDir  string
	prefixErr  error
)

// pythonPrefix makes the relocatable Debian CPython 3.11 prefix once per run.
func pythonPrefix(t testing.TB) string {
	t.Helper()
	prefixOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		prefixDir, prefixErr = fixture.DebianPython(ctx, debCache(), filepath.Join(scratch, "python-prefix"))
	})
	if prefixErr != nil {
		t.Fatal(prefixErr)
	}
	return prefixDir
}

// fooIndex writes foo 1.0 and 2.0 (pure wheels whose foo.__version__ is the version)
// into a fresh directory, serves it with pylayer index serve for the test's lifetime and
// returns the index URL.
func fooIndex(t testing.TB) string {
	t.Helper()
	dir := sharedDir(t)
	for _, v := range []string{"1.0", "2.0"} {
		if _, err := (fixture.Wheel{Name: "foo", Version: v}).Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	return serveIndex(t, dir)
}

// stack is a base (the office set) and two ext layers over it, foo==1.0 and foo==2.0,
// published and signed into one repository.
type stack struct {
	pub                          string // the signing key's public half: --trust for runs
	base, ext1, ext2             published
	baseLock, ext1Lock, ext2Lock string
	baseTag, ext1Tag, ext2Tag    string // REPO:TAG references
}

// publishStack locks and publishes the stack to repo from host h; extra are registry flags
// for publish (e.g. --ca-file). Ext layers are built with --interpreter /usr/bin/python3.11.
func publishStack(ctx context.Context, t testing.TB, h *host, repo string, extra ...string) *stack {
	t.Helper()
	fooURL := fooIndex(t)
	dir := sharedDir(t)
	s := &stack{baseLock: locks(t)["office"]}
	priv, pub := h.keygen(ctx, t, "ci")
	s.pub = pub
	s.base = h.publish(ctx, t, s.baseLock, repo, priv, append([]string{"--interpreter", "/usr/bin/python3.11"}, extra...)...)
	for i, p := range []*published{&s.ext1, &s.ext2} {
		v := fmt.Sprintf("%d.0", i+1)
		out := filepath.Join(dir, "ext"+v+".lock.json")
		if r := run(ctx, t, dir, lockArgs(fooURL, out, []string{"foo==" + v}, "--kind", "ext", "-c", s.baseLock)...); r.code != 0 {
			t.Fatalf("pylayer lock foo==%s --kind ext: exit %d\n%s", v, r.code, r.stderr)
		}
		args := append([]string{"publish", out, "--repo", repo, "--key", priv, "--index-url", fooURL,
			"--interpreter", "/usr/bin/python3.11", "--json"}, extra...)
		if err := json.Unmarshal([]byte(h.must(ctx, t, args...)), p); err != nil {
			t.Fatalf("pylayer publish --json: %v", err)
		}
		if p.Ref != repo+"@"+p.Digest {
			t.Fatalf("publish of foo==%s printed ref %q, want %s@%s", v, p.Ref, repo, p.Digest)
		}
		if i == 0 {
			s.ext1Lock = out
		} else {
			s.ext2Lock = out
		}
	}
	s.baseTag, s.ext1Tag, s.ext2Tag = repo+":"+s.base.Tag, repo+":"+s.ext1.Tag, repo+":"+s.ext2.Tag
	return s
}

// lockSet is the name==version set of a lock file.
func lockSet(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lf lockFile
	if err := json.Unmarshal(b, &lf); err != nil {
		t.Fatalf("lock %s: %v", path, err)
	}
	var out []string
	for _, p := range lf.Packages {
		out = append(out, p.Name+"=="+p.Version)
	}
	return sortedCopy(out)
}

// argvJSON is the output of pylayer run --print-argv --json.
type argvJSON struct {
	Argv     []string `json:"argv"`
	Degraded bool     `json:"degraded"`
}

// printArgv runs pylayer --json run --print-argv with args (flags only, no command).
func (h *host) printArgv(ctx context.Context, t testing.TB, args ...string) argvJSON {
	t.Helper()
	out := h.must(ctx, t, append(append([]string{"--json", "run", "--print-argv"}, args...), "--", "true")...)
	var a argvJSON
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("pylayer run --print-argv --json printed %q: %v", out, err)
	}
	return a
}

// mountSource is the host source of the bind mount at dest in a bwrap argv ("" if none).
func mountSource(argv []string, dest string) string {
	for i := 0; i+2 < len(argv); i++ {
		if (argv[i] == "--ro-bind" || argv[i] == "--bind") && argv[i+2] == dest {
			return argv[i+1]
		}
	}
	return ""
}

// hostProcs returns the host pids whose command line contains marker, with the command lines.
func hostProcs(t testing.TB, marker string) map[int]string {
	t.Helper()
	des, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, de := range des {
		var pid int
		if _, err := fmt.Sscanf(de.Name(), "%d", &pid); err != nil || fmt.Sprint(pid) != de.Name() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", de.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue // gone meanwhile, or not ours
		}
		out[pid] = string(bytes.ReplaceAll(bytes.TrimRight(b, "\x00"), []byte{0}, []byte{' '}))
	}
	return out
}

// publishInterpreter publishes the Debian CPython prefix with pylayer interpreter publish.
func publishInterpreter(ctx context.Context, t testing.TB, h *host, repo, priv string, extra ...string) published {
	t.Helper()
	args := append([]string{"interpreter", "publish", pythonPrefix(t), "--repo", repo, "--key", priv, "--json"}, extra...)
	var p published
	if err := json.Unmarshal([]byte(h.must(ctx, t, args...)), &p); err != nil {
		t.Fatalf("pylayer interpreter publish --json: %v", err)
	}
	if !strings.HasPrefix(p.Digest, "sha256:") || p.Ref != repo+"@"+p.Digest || !strings.HasPrefix(p.Tag, "cpython-3.11") {
		t.Fatalf("pylayer interpreter publish printed ref %q digest %q tag %q for repo %s", p.Ref, p.Digest, p.Tag, repo)
	}
	return p
}
