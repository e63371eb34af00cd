package registrytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeGo stands in for `go install PKG@VERSION`: it counts its runs, takes a while, and
// writes a tiny executable named after PKG into $GOBIN (or fails when $FAKE_GO_FAIL is set).
const fakeGo = `#!/bin/bash
set -eu
echo "$*" >> "$FAKE_GO_COUNT"
[ "$1" = install ] || exit 2
[ -z "${FAKE_GO_FAIL:-}" ] || { echo "no network" >&2; exit 1; }
sleep 0.3
pkg=${2%@*}
printf '#!/bin/sh\necho %s\n' "$2" > "$GOBIN/${pkg##*/}"
chmod +x "$GOBIN/${pkg##*/}"
`

type toolsEnv struct {
	tools, count string
	env          []string
}

func newToolsEnv(t *testing.T) toolsEnv {
	t.Helper()
	dir := t.TempDir()
	goBin := filepath.Join(dir, "go")
	if err := os.WriteFile(goBin, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	e := toolsEnv{tools: filepath.Join(dir, "tools"), count: filepath.Join(dir, "count")}
	e.env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GO=" + goBin, "PYLAYER_TOOLS=" + e.tools, "FAKE_GO_COUNT=" + e.count}
	return e
}

func (e toolsEnv) run(t *testing.T, extraEnv []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root, rerr := repoRoot()
	if rerr != nil {
		t.Fatal(rerr)
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "scripts", "tools.sh")}, args...)...)
	cmd.Env = append(append([]string{}, e.env...), extraEnv...)
	var o, s bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &s
	err = cmd.Run()
	return o.String(), s.String(), err
}

func (e toolsEnv) builds(t *testing.T) int {
	b, err := os.ReadFile(e.count)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestToolsScriptBuildsOnceUnderLock(t *testing.T) {
	e := newToolsEnv(t)
	const callers = 4
	var wg sync.WaitGroup
	outs := make([]string, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var stderr string
			outs[i], stderr, errs[i] = e.run(t, nil, "cosign")
			if errs[i] != nil {
				t.Errorf("caller %d: %v\n%s", i, errs[i], stderr)
			}
		}()
	}
	wg.Wait()
	want := filepath.Join(e.tools, "cosign-v2.6.5", "cosign") + "\n"
	for i, out := range outs {
		if out != want {
			t.Errorf("caller %d printed %q, want %q", i, out, want)
		}
	}
	if n := e.builds(t); n != 1 {
		t.Errorf("%d builds for %d concurrent callers, want 1", n, callers)
	}
	if out, err := exec.Command(strings.TrimSpace(want)).Output(); err != nil || string(out) != "github.com/sigstore/cosign/v2/cmd/cosign@v2.6.5\n" {
		t.Errorf("the built tool runs as %q, %v", out, err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.tools, ".tmp-*")); len(left) != 0 {
		t.Errorf("temporary build directories left: %v", left)
	}
	// Cached: no second build.
	if _, _, err := e.run(t, nil, "cosign"); err != nil || e.builds(t) != 1 {
		t.Errorf("second call: %v, %d builds", err, e.builds(t))
	}
}

// goModVersion is the version go.mod requires of module, which tools.sh builds crane at.
func goModVersion(t *testing.T, module string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("%s is not in go.mod", module)
	return ""
}

func TestToolsScript(t *testing.T) {
	crane := "crane-" + goModVersion(t, "github.com/google/go-containerregistry") + "/crane"
	tests := []struct {
		name      string
		args      []string
		env       []string
		setup     func(t *testing.T, e toolsEnv)
		wantOut   []string // paths under PYLAYER_TOOLS
		wantErr   string
		wantBuild int
	}{
		{name: "crane at the go.mod version", args: []string{"crane"}, wantOut: []string{crane}, wantBuild: 1},
		{name: "all", args: []string{"all"}, wantOut: []string{"cosign-v2.6.5/cosign", crane}, wantBuild: 2},
		{name: "no name", args: nil, wantErr: "usage"},
		{name: "unknown name", args: []string{"oras"}, wantErr: "usage"},
		{name: "build fails", args: []string{"cosign"}, env: []string{"FAKE_GO_FAIL=1"}, wantErr: "building github.com/sigstore/cosign/v2/cmd/cosign@v2.6.5 failed", wantBuild: 1},
		{
			name: "leftover directory without the tool is replaced",
			args: []string{"cosign"},
			setup: func(t *testing.T, e toolsEnv) {
				if err := os.MkdirAll(filepath.Join(e.tools, "cosign-v2.6.5", "junk"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantOut: []string{"cosign-v2.6.5/cosign"}, wantBuild: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newToolsEnv(t)
			if tt.setup != nil {
				tt.setup(t, e)
			}
			out, stderr, err := e.run(t, tt.env, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(stderr, tt.wantErr) {
					t.Errorf("err %v, stderr %q; want failure with %q", err, stderr, tt.wantErr)
				}
				if out != "" {
					t.Errorf("stdout %q on failure, want nothing", out)
				}
				if left, _ := filepath.Glob(filepath.Join(e.tools, "*-v*")); len(left) != 0 {
					t.Errorf("failed build left %v", left)
				}
			} else {
				if err != nil {
					t.Fatalf("%v\n%s", err, stderr)
				}
				var want string
				for _, p := range tt.wantOut {
					want += filepath.Join(e.tools, p) + "\n"
				}
				if out != want {
					t.Errorf("stdout %q, want %q", out, want)
				}
				if _, err := os.Stat(filepath.Join(e.tools, "cosign-v2.6.5", "junk")); err == nil {
					t.Errorf("leftover directory kept")
				}
			}
			if n := e.builds(t); n != tt.wantBuild {
				t.Errorf("%d builds, want %d", n, tt.wantBuild)
			}
		})
	}
}
