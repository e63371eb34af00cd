//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/internal/testenv"
)

// These tests run the real bwrap (Debian's bubblewrap) with the host's
// /usr/bin/python3 in degraded mode. They never skip: a host without bwrap or
// python3 fails them.

func realBwrap(t *testing.T) string {
	t.Helper()
	b, err := FindBwrap()
	if err != nil {
		t.Fatalf("%v (the sandbox tests need the real bwrap)", err)
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatalf("degraded-mode tests need the host's /usr/bin/python3: %v", err)
	}
	return b
}

// makeLayer writes files (relative path -> content) under a new layer root.
// sharedDir is testenv.SharedDir: a directory the sandbox user can enter.
func sharedDir(t testing.TB) string { return testenv.SharedDir(t) }

func makeLayer(t *testing.T, files map[string]string) string {
	t.Helper()
	root := sharedDir(t)
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func run(t *testing.T, s Spec, o RunOptions) *Result {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 20 * time.Second
	}
	res, err := Run(context.Background(), realBwrap(t), s, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func py(code string) []string { return []string{"python3", "-c", code} }

// supportModes runs f with a support tree in a fresh host directory and without one
// (its files handed to bwrap as data): a session must be the same either way.
func supportModes(t *testing.T, f func(t *testing.T, support string)) {
	t.Run("data", func(t *testing.T) { f(t, "") })
	t.Run("support", func(t *testing.T) { f(t, filepath.Join(sharedDir(t), "sandbox")) })
}

func TestRunImports(t *testing.T) {
	testenv.Integration(t, "bwrap")
	base := makeLayer(t, map[string]string{
		"site-packages/foo/__init__.py": `WHERE = "base"`,
		"site-packages/shared.py":       `WHERE = "base"`,
		"site-packages/enum.py":         `raise SystemExit("a layer shadowed the stdlib")`,
		"site-packages/ns.pth":          "extra\n",
		"site-packages/extra/pthmod.py": `WHERE = "pth"`,
	})
	ext := makeLayer(t, map[string]string{
		"site-packages/bar/__init__.py": "from foo import WHERE as FOO\nWHERE = \"ext\"",
		"site-packages/shared.py":       `WHERE = "ext"`,
	})
	iso := makeLayer(t, map[string]string{"site-packages/foo/__init__.py": `WHERE = "iso"`})
	const code = `import json, enum, foo, shared, os
out = {"foo": foo.WHERE, "foo_file": foo.__file__, "shared": shared.WHERE, "enum": enum.__file__,
       "base_mounted": os.path.exists("/opt/pylayer/layers/0-base")}
try:
    import bar; out["bar"] = bar.WHERE; out["bar_foo"] = bar.FOO
except ImportError: out["bar"] = None
try:
    import pthmod; out["pth"] = pthmod.WHERE
except ImportError: out["pth"] = None
print(json.dumps(out))`
	tests := []struct {
		name   string
		layers []Layer
		want   map[string]any
	}{
		{"base and ext", []Layer{{Root: base, Kind: KindBase}, {Root: ext, Kind: KindExt}}, map[string]any{
			"foo": "base", "foo_file": "/opt/pylayer/layers/0-base/site-packages/foo/__init__.py",
			"shared": "ext", "bar": "ext", "bar_foo": "base", "pth": "pth", "base_mounted": true,
			"enum": "/usr/lib/python3.11/enum.py"}},
		{"iso replaces base", []Layer{{Root: base, Kind: KindBase}, {Root: iso, Kind: KindIso}}, map[string]any{
			"foo": "iso", "foo_file": "/opt/pylayer/layers/1-iso/site-packages/foo/__init__.py",
			"shared": nil, "bar": nil, "pth": nil, "base_mounted": false}},
	}
	supportModes(t, func(t *testing.T, support string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c := code
				if tt.name == "iso replaces base" {
					c = strings.Replace(c, ", shared, os", ", os", 1)
					c = strings.Replace(c, `"shared": shared.WHERE,`, `"shared": None,`, 1)
				}
				res := run(t, Spec{Layers: tt.layers, Support: support, Command: py(c)}, RunOptions{})
				if res.ExitCode != 0 || len(res.Stderr) != 0 {
					t.Fatalf("exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
				}
				var got map[string]any
				if err := json.Unmarshal(res.Stdout, &got); err != nil {
					t.Fatalf("%v: %s", err, res.Stdout)
				}
				for k, v := range tt.want {
					if got[k] != v {
						t.Errorf("%s = %v, want %v", k, got[k], v)
					}
				}
			})
		}
	})
}

// TestRunOwnSitecustomize: the guard's sitecustomize hands over to the interpreter's own
// (here a layer's, which a pip install would have put in site-packages): it runs once, is
// the module the name imports afterwards, and pip stays refused.
func TestRunOwnSitecustomize(t *testing.T) {
	testenv.Integration(t, "bwrap")
	base := makeLayer(t, map[string]string{
		"site-packages/sitecustomize.py": "import builtins\nbuiltins.OWN_RUNS = getattr(builtins, 'OWN_RUNS', 0) + 1",
	})
	const code = `import builtins, json, sys, sitecustomize
try:
    import pip; refused = False
except ImportError: refused = True
print(json.dumps({"runs": getattr(builtins, "OWN_RUNS", 0), "module": sitecustomize.__file__,
                  "pip_refused": refused, "importlib_util": "importlib.util" in sys.modules}))`
	supportModes(t, func(t *testing.T, support string) {
		res := run(t, Spec{Layers: []Layer{{Root: base, Kind: KindBase}}, Support: support, Command: py(code)}, RunOptions{})
		if res.ExitCode != 0 || len(res.Stderr) != 0 {
			t.Fatalf("exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		var got map[string]any
		if err := json.Unmarshal(res.Stdout, &got); err != nil {
			t.Fatalf("%v: %s", err, res.Stdout)
		}
		want := map[string]any{"runs": 1.0, "module": "/opt/pylayer/layers/0-base/site-packages/sitecustomize.py",
			"pip_refused": true, "importlib_util": false}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %v, want %v", k, got[k], v)
			}
		}
	})
}

func TestRunContainment(t *testing.T) {
	testenv.Integration(t, "bwrap")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	base := makeLayer(t, map[string]string{"site-packages/foo/__init__.py": ""})
	ext := makeLayer(t, map[string]string{"site-packages/bar/__init__.py": ""})
	// A minimal interpreter prefix: bin/python3 pointing at the host's python.
	interp := sharedDir(t)
	if err := os.Mkdir(filepath.Join(interp, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/python3", filepath.Join(interp, "bin", "python3")); err != nil {
		t.Fatal(err)
	}
	ws := sharedDir(t)
	connect := fmt.Sprintf(`import socket, sys
s = socket.socket(); s.settimeout(3)
try:
    s.connect(("127.0.0.1", %d))
except OSError as e:
    print("refused:", e); sys.exit(7)
print("connected")`, port)
	layers := []Layer{{Root: base, Kind: KindBase}, {Root: ext, Kind: KindExt}}
	tests := []struct {
		name    string
		spec    Spec
		code    string
		want    int
		wantOut string
	}{
		{"no network", Spec{}, connect, 7, "refused"},
		{"network flag shares it", Spec{Network: true}, connect, 0, "connected"},
		{"read-only file system", Spec{Interpreter: interp}, `import sys
paths = ["/x", "/usr/x", "/usr/lib/x", "/etc/x", "/etc/passwd", "/opt/python/x", "/opt/python/bin/x",
         "/opt/pylayer/x", "/opt/pylayer/bin/pip", "/opt/pylayer/bin/x", "/opt/pylayer/guard/x",
         "/opt/pylayer/guard/sitecustomize.py", "/opt/pylayer/support/x", "/etc/group",
         "/opt/pylayer/layers/0-base/x", "/opt/pylayer/layers/0-base/site-packages/foo/x",
         "/opt/pylayer/layers/0-base/site-packages/foo/__init__.py", "/opt/pylayer/layers/1-ext/site-packages/bar/x"]
bad = []
for p in paths:
    try:
        open(p, "a").close(); bad.append(p)
    except OSError:
        pass
open("/workspace/ok", "w").write("written"); open("/tmp/ok", "w").close(); open("/home/sandbox/ok", "w").close()
print("writable:", bad); sys.exit(1 if bad else 0)`, 0, "writable: []"},
		{"degraded /opt/python read-only", Spec{}, `import sys
try:
    open("/opt/python/x", "w"); sys.exit(1)
except OSError:
    print("ok")`, 0, "ok"},
		{"host private dirs absent", Spec{}, `import os, sys
var = [r for r, _, _ in os.walk("/var") if r not in ("/var", "/var/cache") and not r.startswith("/var/cache/fontconfig")]
print(os.listdir("/home"), os.listdir("/home/sandbox"), [p for p in ("/root", "/run", "/mnt", "/srv", "/work") if os.path.exists(p)], var, sorted(os.listdir("/etc")))
sys.exit(0)`, 0, "['sandbox'] [] [] [] " + etcListing()},
		{"identity", Spec{}, `import os, pwd, getpass
print(os.getuid(), os.getgid(), pwd.getpwuid(os.getuid()).pw_name, getpass.getuser(), os.path.expanduser("~"), os.uname().nodename)`,
			0, "1000 1000 sandbox sandbox /home/sandbox sandbox"},
	}
	supportModes(t, func(t *testing.T, support string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := tt.spec
				s.Layers, s.Workspace, s.Support, s.Command = layers, ws, support, py(tt.code)
				res := run(t, s, RunOptions{})
				if res.ExitCode != tt.want || !strings.Contains(string(res.Stdout), tt.wantOut) {
					t.Errorf("exit %d, want %d; stdout %q, want %q; stderr %s", res.ExitCode, tt.want, res.Stdout, tt.wantOut, res.Stderr)
				}
			})
		}
	})
	if b, err := os.ReadFile(filepath.Join(ws, "ok")); err != nil || string(b) != "written" {
		t.Errorf("workspace write did not reach the host: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(base, "x")); err == nil {
		t.Error("a sandbox wrote into a layer")
	}
}

var canaries = map[string]string{
	"AWS_SECRET_ACCESS_KEY": "canary-aws-7f3a",
	"OPENAI_API_KEY":        "canary-openai-91c2",
	"REGISTRY_PASSWORD":     "canary-registry-5e0d",
}

func TestRunSecretsDoNotLeak(t *testing.T) {
	testenv.Integration(t, "bwrap")
	for k, v := range canaries {
		t.Setenv(k, v)
	}
	b := realBwrap(t)
	marker := "leakcheck-" + strconv.Itoa(os.Getpid())
	type out struct {
		res *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := Run(context.Background(), b, Spec{Command: []string{"sh", "-c",
			`env; cat /proc/*/environ | tr '\0' '\n'; sleep 3; echo ` + marker}}, RunOptions{Timeout: 20 * time.Second})
		ch <- out{res, err}
	}()
	// Find the bwrap process and everything under it while it runs.
	var host []string
	deadline := time.Now().Add(10 * time.Second)
	for pid := 0; pid == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		pid = findProc(t, b, marker)
		if pid == 0 {
			continue
		}
		for _, p := range append([]int{pid}, descendants(pid)...) {
			for _, f := range []string{"cmdline", "environ"} {
				data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", p, f))
				if err != nil {
					continue
				}
				host = append(host, fmt.Sprintf("%d/%s: %s", p, f, data))
				if p == pid && f == "environ" && len(data) != 0 {
					t.Errorf("bwrap's environment is not empty: %q", data)
				}
			}
		}
	}
	if len(host) == 0 {
		t.Fatal("never saw the bwrap process")
	}
	o := <-ch
	if o.err != nil || o.res.ExitCode != 0 {
		t.Fatalf("Run: %v %+v", o.err, o.res)
	}
	inside := string(o.res.Stdout) + string(o.res.Stderr)
	if !strings.Contains(inside, "HOME=/home/sandbox") {
		t.Fatalf("the sandbox printed no environment: %s", inside)
	}
	for k, v := range canaries {
		for _, where := range append(host, inside) {
			if strings.Contains(where, v) || strings.Contains(where, k) {
				t.Errorf("secret %s leaked: %.300s", k, where)
			}
		}
	}
}

// findProc returns the pid of a running bwrap whose command line contains marker.
func findProc(t *testing.T, bwrap, marker string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.HasPrefix(cmd, []byte(bwrap+"\x00")) && bytes.Contains(cmd, []byte(marker)) {
			if pp, _ := parentOf(pid); pp == os.Getpid() {
				return pid
			}
		}
	}
	return 0
}

func TestRunPipShim(t *testing.T) {
	testenv.Integration(t, "bwrap")
	for _, cmd := range [][]string{
		{"pip", "install", "requests"}, {"pip3", "install", "x"}, {"pip3.11", "list"},
		{"python3", "-m", "pip", "install", "x"}, {"python3", "-c", "import pip"},
	} {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			supportModes(t, func(t *testing.T, support string) {
				res := run(t, Spec{Command: cmd, Support: support}, RunOptions{})
				if res.ExitCode == 0 {
					t.Error("exit status 0")
				}
				if !strings.Contains(string(res.Stderr), "pip is disabled in this sandbox") ||
					!strings.Contains(string(res.Stderr), "POST /v1/sessions/{id}/requests") {
					t.Errorf("stderr lacks the guidance: %s", res.Stderr)
				}
			})
		})
	}
}

func TestRunTimeoutKillsEverything(t *testing.T) {
	testenv.Integration(t, "bwrap")
	ws := sharedDir(t)
	marker := "killcheck-" + strconv.Itoa(os.Getpid())
	// A child and a grandchild that both ignore SIGTERM and record their pids.
	const code = `import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open("/workspace/pids", "a").write(f"{os.getpid()}\n")
if sys.argv[1] == "child":
    subprocess.Popen([sys.executable, "-c", __CODE__, "grandchild", sys.argv[2]])
while True:
    time.sleep(1)`
	full := strings.Replace(code, "__CODE__", strconv.Quote(code), 1)
	start := time.Now()
	res := run(t, Spec{Workspace: ws, Command: []string{"python3", "-c", full, "child", marker}},
		RunOptions{Timeout: 1500 * time.Millisecond, KillGrace: 300 * time.Millisecond})
	if !res.TimedOut || res.Signal != "SIGKILL" || res.ExitCode != 137 {
		t.Errorf("TimedOut %v, Signal %q, ExitCode %d: want a timeout ended by SIGKILL", res.TimedOut, res.Signal, res.ExitCode)
	}
	if d := time.Since(start); d > 15*time.Second { // a kill that fails would wait for ever
		t.Errorf("Run took %v", d)
	}
	pids, err := os.ReadFile(filepath.Join(ws, "pids"))
	if err != nil || len(strings.Fields(string(pids))) != 2 {
		t.Fatalf("want the pids of the child and the grandchild, got %q %v", pids, err)
	}
	// The pids in the file are the sandbox's own (pid namespace); on the host
	// the processes are found by the marker in their command line.
	if left := procsWith(marker); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}

// procsWith returns the live processes whose command line contains s.
func procsWith(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if f := statFields(pid); err == nil && bytes.Contains(cmd, []byte(s)) && len(f) > 0 && f[0] != "Z" {
			out = append(out, fmt.Sprintf("%d %q", pid, cmd))
		}
	}
	return out
}

func TestRunTermGrace(t *testing.T) {
	testenv.Integration(t, "bwrap")
	// A command that exits on SIGTERM is not SIGKILLed.
	res := run(t, Spec{Command: []string{"sleep", "60"}}, RunOptions{Timeout: 300 * time.Millisecond, KillGrace: 10 * time.Second})
	if !res.TimedOut || res.Signal != "SIGTERM" || res.Duration > 5*time.Second {
		t.Errorf("TimedOut %v Signal %q Duration %v, want SIGTERM soon after the timeout", res.TimedOut, res.Signal, res.Duration)
	}
}

func TestRunOutput(t *testing.T) {
	testenv.Integration(t, "bwrap")
	tests := []struct {
		name               string
		code               string
		max                int64
		wantOut, wantErr   string
		truncOut, truncErr bool
	}{
		{"under the cap", `print("hi")`, 100, "hi\n", "", false, false},
		{"stdout cut", `import sys; sys.stdout.write("a" * 100000); sys.stderr.write("bb")`, 1000,
			strings.Repeat("a", 1000) + "\n[pylayer: output truncated after 1000 bytes]\n", "bb", true, false},
		{"both cut, child keeps writing", `import sys
for _ in range(200): sys.stdout.write("o" * 65536); sys.stderr.write("e" * 65536)
print("done", file=sys.stderr)`, 10,
			"oooooooooo\n[pylayer: output truncated after 10 bytes]\n", "eeeeeeeeee\n[pylayer: output truncated after 10 bytes]\n", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, Spec{Command: py(tt.code)}, RunOptions{MaxOutput: tt.max})
			if res.ExitCode != 0 || res.TimedOut {
				t.Fatalf("exit %d timed out %v: %s", res.ExitCode, res.TimedOut, res.Stderr)
			}
			if string(res.Stdout) != tt.wantOut || res.StdoutTruncated != tt.truncOut {
				t.Errorf("stdout %.80q (truncated %v), want %.80q", res.Stdout, res.StdoutTruncated, tt.wantOut)
			}
			if string(res.Stderr) != tt.wantErr || res.StderrTruncated != tt.truncErr {
				t.Errorf("stderr %.80q (truncated %v), want %.80q", res.Stderr, res.StderrTruncated, tt.wantErr)
			}
		})
	}
}

func TestRunExitStatus(t *testing.T) {
	testenv.Integration(t, "bwrap")
	tests := []struct {
		cmd    string
		code   int
		signal string
	}{
		{"true", 0, ""},
		{"exit 3", 3, ""},
		{"kill -SEGV $$", 139, "SIGSEGV"},
		{"kill -KILL $$", 137, "SIGKILL"},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			res := run(t, Spec{Command: []string{"sh", "-c", tt.cmd}}, RunOptions{ID: "exit-test"})
			if res.ExitCode != tt.code || res.Signal != tt.signal || res.TimedOut || res.ID != "exit-test" {
				t.Errorf("got %+v, want exit %d signal %q", res, tt.code, tt.signal)
			}
		})
	}
}

func TestRunStdinAndCancel(t *testing.T) {
	testenv.Integration(t, "bwrap")
	b := realBwrap(t)
	res, err := Run(context.Background(), b, Spec{Command: []string{"cat"}}, RunOptions{Stdin: strings.NewReader("hello")})
	if err != nil || string(res.Stdout) != "hello" {
		t.Errorf("stdin: %v %q", err, res.Stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err = Run(ctx, b, Spec{Command: []string{"sleep", "60"}}, RunOptions{})
	if !errors.Is(err, context.DeadlineExceeded) || res == nil || res.TimedOut || res.Duration > 5*time.Second {
		t.Errorf("cancel: %v %+v", err, res)
	}
}

func TestRunBadInput(t *testing.T) {
	testenv.Integration(t, "bwrap")
	b := realBwrap(t)
	noPython := sharedDir(t)
	file := filepath.Join(sharedDir(t), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec Spec
		opts RunOptions
	}{
		{"missing layer", Spec{Layers: []Layer{{Root: "/nonexistent/layer", Kind: KindBase}}, Command: []string{"true"}}, RunOptions{}},
		{"layer is a file", Spec{Layers: []Layer{{Root: file, Kind: KindBase}}, Command: []string{"true"}}, RunOptions{}},
		{"not a prefix", Spec{Interpreter: noPython, Command: []string{"true"}}, RunOptions{}},
		{"missing workspace", Spec{Workspace: "/nonexistent/ws", Command: []string{"true"}}, RunOptions{}},
		{"bad id", Spec{Command: []string{"true"}}, RunOptions{ID: "../x"}},
		{"negative timeout", Spec{Command: []string{"true"}}, RunOptions{Timeout: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Run(context.Background(), b, tt.spec, tt.opts); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("err = %v, want ErrInvalidSpec", err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	testenv.Integration(t, "bwrap")
	b := realBwrap(t)
	if b != "/usr/bin/bwrap" {
		t.Errorf("FindBwrap = %q", b)
	}
	if err := Check(context.Background(), b); err != nil {
		t.Fatalf("Check: %v", err)
	}
	// Fake bwraps that fail the way real ones do on hosts without user
	// namespaces or with an old bubblewrap.
	dir := sharedDir(t)
	tests := []struct {
		name, stderr string
		want         error
	}{
		{"no userns", "bwrap: No permission to create new namespace, likely because the kernel does not allow non-privileged user namespaces.", ErrNoNamespaces},
		{"uid map", "bwrap: setting up uid map: Permission denied", ErrNoNamespaces},
		{"too old", "bwrap: Unknown option --perms", ErrBwrapTooOld},
		{"other", "bwrap: Can't mount proc on /newroot/proc: Operation not permitted", ErrBwrapFailed},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := filepath.Join(dir, "bwrap"+strconv.Itoa(i))
			script := "#!/bin/sh\ncat >&2 <<'MSG'\n" + tt.stderr + "\nMSG\nexit 1\n"
			if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			err := Check(context.Background(), fake)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.stderr) {
				t.Errorf("err = %v, want %v with bwrap's message", err, tt.want)
			}
		})
	}
}

// BenchmarkSessionHardening measures what hardening costs a session: the same
// `python3 -c pass` run hardened (sandbox user, seccomp, limits through prlimit,
// read-only /proc/sys and /dev, sized tmpfs, no nested user namespaces) and as
// pylayer ran it before. bench/run.sh prints the difference.
func BenchmarkSessionHardening(b *testing.B) {
	bw, err := FindBwrap()
	if err != nil {
		b.Fatal(err)
	}
	for _, tt := range []struct {
		name       string
		unhardened bool
	}{{"hardened", false}, {"unhardened", true}} {
		b.Run(tt.name, func(b *testing.B) {
			// The hardened side as the CLI runs it, with a support tree.
			s := Spec{Command: []string{"python3", "-S", "-c", "pass"}, unhardened: tt.unhardened}
			if !tt.unhardened { // the tree and the guard's bytecode made before the timed loop, as a host's first session does
				s.Support = filepath.Join(sharedDir(b), "sandbox")
				if _, err := ensureSupport(context.Background(), s.Support); err != nil {
					b.Fatal(err)
				}
				if guardBytecode(context.Background(), bw, s, "") == "" {
					b.Fatal("the guard's bytecode could not be compiled")
				}
			}
			for b.Loop() {
				res, err := Run(context.Background(), bw, s, RunOptions{})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}

// etcListing is what the sandbox's /etc holds, as Python prints its sorted listing:
// the generated passwd and group, and those of the host's files Argv binds that the
// host has (fonts only where fontconfig is installed).
func etcListing() string {
	names := []string{"'group'", "'passwd'"}
	seen := map[string]bool{}
	for _, f := range etcFiles {
		top := strings.SplitN(strings.TrimPrefix(f, "/etc/"), "/", 2)[0]
		if _, err := os.Stat(f); err == nil && !seen[top] {
			seen[top] = true
			names = append(names, "'"+top+"'")
		}
	}
	sort.Strings(names)
	return "[" + strings.Join(names, ", ") + "]"
}
