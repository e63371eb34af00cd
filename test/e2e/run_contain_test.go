package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// secretsScript prints everything a sandboxed process can see of environments and command
// lines: its own environment, /proc/*/environ and /proc/*/cmdline of every process in the
// sandbox, and the files named in argv (the host's docker config).
const secretsScript = `
import glob, os, sys
out = ["environ: " + repr(dict(os.environ))]
for p in sorted(glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline")) + sys.argv[1:]:
    try:
        out.append(p + ": " + open(p, "rb").read().decode("latin-1").replace("\0", " "))
    except OSError as e:
        out.append(p + ": unreadable: " + type(e).__name__)
print("\n".join(out))
`

// timeoutScript ignores SIGTERM, writes its pid to the workspace and sleeps forever; as
// "child" it first starts itself as "grandchild" in a new session (out of its process group).
const timeoutScript = `
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
role, marker = sys.argv[1], sys.argv[2]
if role == "child":
    subprocess.Popen([sys.executable, "/workspace/stubborn.py", "grandchild", marker], start_new_session=True)
with open(f"/workspace/{role}.pid", "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(1)
`

func canary(name string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return "canary-" + name + "-" + hex.EncodeToString(b)
}

// TestRunContainment runs commands through pylayer run (interpreter artifact + base layer
// from an OCI layout) on a host whose own environment carries secrets, and checks each
// promise of the sandbox.
func TestRunContainment(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The host's secrets: in pylayer's environment and in its docker config.
	secrets := map[string]string{
		"AWS_SECRET_ACCESS_KEY": canary("aws"),
		"OPENAI_API_KEY":        canary("openai"),
		"REGISTRY_PASSWORD":     canary("registry"),
	}
	dockerPassword := canary("docker")
	dockerAuth := base64.StdEncoding.EncodeToString([]byte("ci:" + dockerPassword))
	dockerDir := sharedDir(t)
	dockerConfig := filepath.Join(dockerDir, "config.json")
	cfg := fmt.Sprintf(`{"auths": {"registry.example.com": {"auth": %q, "username": "ci", "password": %q}}}`, dockerAuth, dockerPassword)
	if err := os.WriteFile(dockerConfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"DOCKER_CONFIG=" + dockerDir}
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	h := newHost(t, env...)
	repo := "oci:" + filepath.Join(sharedDir(t), "repo")
	priv, pub := h.keygen(ctx, t, "ci")
	base := h.publish(ctx, t, locks(t)["office"], repo, priv)
	py := publishInterpreter(ctx, t, h, repo, priv)
	layers := []string{"--trust", pub, "--python", py.Ref, "--layer", base.Ref}
	// sandbox runs a command in a session on the interpreter and the base.
	sandbox := func(t *testing.T, flags []string, cmd ...string) result {
		t.Helper()
		args := append(append(append([]string{"run"}, layers...), flags...), "--")
		return h.run(ctx, t, append(args, cmd...)...)
	}
	leaks := func(t *testing.T, where, text string) {
		t.Helper()
		for k, v := range secrets {
			if strings.Contains(text, v) {
				t.Errorf("%s shows the host's %s", where, k)
			}
		}
		for what, v := range map[string]string{"password": dockerPassword, "auth": dockerAuth} {
			if strings.Contains(text, v) {
				t.Errorf("%s shows the docker config's %s", where, what)
			}
		}
	}

	t.Run("no network to the host's loopback", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var accepted atomic.Int32
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		// The listener answers from the host: the probe below is meaningful.
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatalf("the host cannot reach its own listener: %v", err)
		}
		c.Close()
		r := sandbox(t, nil, "python3", "-c",
			"import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5); print('CONNECTED')", fmt.Sprint(port))
		if r.code == 0 || strings.Contains(r.stdout, "CONNECTED") {
			t.Errorf("a sandboxed process connected to 127.0.0.1:%d on the host: exit %d\n%s", port, r.code, r.stdout)
		}
		if !strings.Contains(r.stderr, "Error") {
			t.Errorf("the refused connect gave no Python error on stderr:\n%s", r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
		if n := accepted.Load(); n != 1 {
			t.Errorf("the host listener accepted %d connections, want 1 (the host's own)", n)
		}
	})

	t.Run("read-only system, interpreter and layers", func(t *testing.T) {
		dirs := []string{"/", "/usr", "/usr/lib", "/etc", "/opt", "/opt/python", "/opt/python/lib/python3.11",
			"/opt/pylayer/layers/0-base", "/opt/pylayer/layers/0-base/site-packages",
			"/opt/pylayer/layers/0-base/site-packages/docx", "/workspace", "/tmp", "/home/sandbox"}
		script := `for d in "$@"; do
  if (echo x > "$d/.pylayer-write-probe") 2>/dev/null; then echo "wrote $d"; else echo "refused $d"; fi
done
if (echo x >> /opt/pylayer/layers/0-base/site-packages/docx/__init__.py) 2>/dev/null; then echo "appended docx"; fi
if (echo x >> /opt/python/bin/python3.11) 2>/dev/null; then echo "appended python3.11"; fi`
		r := sandbox(t, nil, append([]string{"sh", "-c", script, "sh"}, dirs...)...)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		want := map[string]string{"/workspace": "wrote", "/tmp": "wrote", "/home/sandbox": "wrote"}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != len(dirs) {
			t.Fatalf("want %d lines, one per directory (nothing appended to files), got:\n%s", len(dirs), r.stdout)
		}
		for _, l := range lines {
			verdict, dir, _ := strings.Cut(l, " ")
			w := want[dir]
			if w == "" {
				w = "refused"
			}
			if verdict != w {
				t.Errorf("%s: %s, want %s", dir, verdict, w)
			}
		}
	})

	t.Run("home shows nothing of the host", func(t *testing.T) {
		r := sandbox(t, nil, "sh", "-c", "ls -A /home; echo --; ls -A /home/sandbox; echo --; ls -A /root 2>&1 | wc -l; test -e "+h.home+" && echo HOST-HOME; true")
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		if want := "sandbox\n--\n--\n1\n"; r.stdout != want {
			t.Errorf("/home, /home/sandbox, /root, host HOME in the sandbox:\n%q\nwant %q (only the sandbox's own empty home, no /root, not the host's HOME %s)", r.stdout, want, h.home)
		}
	})

	t.Run("host secrets stay out", func(t *testing.T) {
		r := sandbox(t, nil, "python3", "-c", secretsScript, dockerConfig)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		// The probe saw what it claims to: the environments of the sandbox's processes.
		if strings.Contains(r.stdout, "/proc/1/environ: unreadable") || !strings.Contains(r.stdout, "/proc/2/environ: HOME=") {
			t.Fatalf("the probe could not read the sandbox's /proc/*/environ:\n%s", r.stdout)
		}
		if !strings.Contains(r.stdout, dockerConfig+": unreadable") {
			t.Errorf("the host's docker config %s is readable in the sandbox", dockerConfig)
		}
		leaks(t, "the sandbox's environment, /proc/*/environ or /proc/*/cmdline", r.stdout)
		leaks(t, "pylayer run's stderr", r.stderr)
		a := h.run(ctx, t, append(append([]string{"run", "--print-argv"}, layers...), "--", "true")...)
		if a.code != 0 {
			t.Fatalf("--print-argv: exit %d\n%s", a.code, a.stderr)
		}
		leaks(t, "bwrap's argv (--print-argv)", a.stdout+a.stderr)
		// Naming a secret explicitly is refused, without echoing its value.
		for k, v := range secrets {
			e := h.refuse(ctx, t, append(append([]string{"run", "--env", k + "=" + v}, layers...), "--", "true")...)
			if !strings.Contains(e, k) {
				t.Errorf("--env %s=...: the refusal does not name the variable:\n%s", k, e)
			}
			leaks(t, "the --env refusal", e)
		}
	})

	t.Run("pip explains and fails", func(t *testing.T) {
		for _, cmd := range [][]string{
			{"pip", "install", "requests"},
			{"pip3.11", "install", "requests"},
			{"python3", "-m", "pip", "install", "requests"},
		} {
			r := sandbox(t, nil, cmd...)
			if r.code == 0 {
				t.Errorf("%s: exit 0, want a failure", strings.Join(cmd, " "))
			}
			if out := r.stdout + r.stderr; !strings.Contains(out, "pip is disabled in this sandbox") || !strings.Contains(out, "request") {
				t.Errorf("%s: no guidance on how to request packages:\n%s", strings.Join(cmd, " "), out)
			}
		}
	})

	t.Run("timeout kills the child and a grandchild that ignore SIGTERM", func(t *testing.T) {
		ws := sharedDir(t)
		if err := os.WriteFile(filepath.Join(ws, "stubborn.py"), []byte(timeoutScript), 0o644); err != nil {
			t.Fatal(err)
		}
		marker := canary("stubborn")
		seen := map[int]string{}
		done := make(chan result)
		start := time.Now()
		go func() {
			done <- sandbox(t, []string{"--workspace", ws, "--timeout", "2s"}, "python3", "/workspace/stubborn.py", "child", marker)
		}()
		var r result
	poll:
		for {
			select {
			case r = <-done:
				break poll
			case <-time.After(20 * time.Millisecond):
				for pid, cmdline := range hostProcs(t, marker) {
					if strings.Contains(cmdline, "stubborn.py") && !strings.Contains(cmdline, "bwrap") && !strings.Contains(cmdline, "--timeout") {
						seen[pid] = cmdline
					}
				}
			}
		}
		elapsed := time.Since(start)
		if r.code == 0 || !strings.Contains(r.stderr, "timed out") {
			t.Errorf("exit %d, stderr %q: want a failure that says the run timed out", r.code, r.stderr)
		}
		if elapsed > 15*time.Second {
			t.Errorf("pylayer run --timeout 2s took %s", elapsed)
		}
		for _, role := range []string{"child", "grandchild"} {
			if _, err := os.Stat(filepath.Join(ws, role+".pid")); err != nil {
				t.Errorf("the %s never ran: %v", role, err)
			}
		}
		if len(seen) < 2 {
			t.Fatalf("saw %d sandboxed processes on the host (%v), want the child and the grandchild", len(seen), seen)
		}
		// pylayer returns once the sandbox is dead: allow the kernel a moment to reap.
		deadline := time.Now().Add(time.Second)
		for {
			left := hostProcs(t, marker)
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the timeout, host processes of the run are alive: %v (pids seen during the run: %v)", left, seen)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for pid := range seen {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(b), marker) {
					t.Errorf("host pid %d of the run is still alive", pid)
				}
			}
		}
	})

	t.Run("output past --max-output is cut and marked", func(t *testing.T) {
		r := sandbox(t, []string{"--max-output", "1000"}, "python3", "-c",
			"import sys; sys.stdout.write('o' * 100000); sys.stderr.write('e' * 50000)")
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		for _, out := range []struct{ name, s, c string }{{"stdout", r.stdout, "o"}, {"stderr", r.stderr, "e"}} {
			name, s, c := out.name, out.s, out.c
			if !strings.HasPrefix(s, strings.Repeat(c, 1000)) || strings.Contains(s, strings.Repeat(c, 1001)) ||
				!strings.Contains(s, "output truncated") || len(s) > 1300 {
				t.Errorf("%s (%d bytes) is not the first 1000 bytes and a truncation note:\n%.200s...", name, len(s), s)
			}
		}
	})

	t.Run("exit codes propagate", func(t *testing.T) {
		for _, tc := range []struct {
			cmd  []string
			want int
		}{
			{[]string{"true"}, 0},
			{[]string{"sh", "-c", "exit 7"}, 7},
			{[]string{"python3", "-c", "import sys; sys.exit(42)"}, 42},
			{[]string{"false"}, 1},
			{[]string{"no-such-command-anywhere"}, -1}, // any failure
		} {
			r := sandbox(t, nil, tc.cmd...)
			if (tc.want >= 0 && r.code != tc.want) || (tc.want < 0 && r.code == 0) {
				t.Errorf("%v: exit %d, want %d\n%s", tc.cmd, r.code, tc.want, r.stderr)
			}
		}
	})
}
