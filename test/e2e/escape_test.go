package e2e

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escapeScript tries, from inside a session, each attack that worked against the sandbox
// before it was hardened, and prints one JSON object: attack -> {"ok": it succeeded,
// "err": what stopped it}. Every attack must fail.
const escapeScript = `
import ctypes, errno, json, os, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return r
out = {}
def attack(name, f):
    try:
        r = f(); out[name] = {"ok": True, "err": repr(r)[:200]}
    except BaseException as e:
        out[name] = {"ok": False, "err": (type(e).__name__ + ": " + str(e))[:200]}
def core_pattern():
    with open("/proc/sys/kernel/core_pattern", "w") as f: f.write("|/workspace/evil")
attack("write /proc/sys/kernel/core_pattern", core_pattern)
def sysrq():
    with open("/proc/sysrq-trigger", "w") as f: f.write("h")
attack("write /proc/sysrq-trigger", sysrq)
def setuid_chmod():
    import shutil; shutil.copy("/usr/bin/id", "/workspace/suid"); os.chmod("/workspace/suid", 0o4755)
    if os.stat("/workspace/suid").st_mode & 0o6000 == 0: raise OSError("setuid bit dropped")
attack("chmod 4755 in the workspace", setuid_chmod)
def setuid_open():
    fd = os.open("/workspace/suid2", os.O_CREAT | os.O_WRONLY, 0o6755); os.close(fd)
    if os.stat("/workspace/suid2").st_mode & 0o6000 == 0: raise OSError("setuid bit dropped")
attack("open O_CREAT 06755 in the workspace", setuid_open)
attack("read a root-only host file", lambda: open("/workspace/root-only/secret").read())
attack("unshare -Urn (nested user namespace)", lambda: subprocess.run(["unshare", "-Urn", "true"], check=True, capture_output=True))
attack("unshare(CLONE_NEWUSER)", lambda: sc(272, 0x10000000))
attack("setns", lambda: sc(308, 0, 0))
attack("mount tmpfs", lambda: sc(165, b"none", b"/tmp", b"tmpfs", 0, 0))
attack("ptrace PTRACE_ATTACH pid 1", lambda: sc(101, 16, 1, 0, 0))
attack("add_key", lambda: sc(248, b"user", b"pylayer", b"x", 1, -3))
attack("keyctl", lambda: sc(250, 0, -3, 0))
attack("io_uring_setup", lambda: sc(425, 1, ctypes.create_string_buffer(120)))
attack("personality(PER_LINUX32)", lambda: sc(135, 0x0008))
attack("bpf", lambda: sc(321, 0, 0, 0))
attack("userfaultfd", lambda: sc(323, 0))
attack("perf_event_open", lambda: sc(298, ctypes.create_string_buffer(128), 0, -1, -1, 0))
attack("socket AF_PACKET", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
attack("socket AF_NETLINK netfilter", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12))
def tiocsti():
    import fcntl, termios
    fcntl.ioctl(0, termios.TIOCSTI, b"x")
attack("ioctl TIOCSTI on stdin", tiocsti)
print(json.dumps(out))
`

// escapeAttacks are the names escapeScript must report, each refused.
var escapeAttacks = []string{
	"write /proc/sys/kernel/core_pattern", "write /proc/sysrq-trigger", "chmod 4755 in the workspace",
	"open O_CREAT 06755 in the workspace", "read a root-only host file", "unshare -Urn (nested user namespace)",
	"unshare(CLONE_NEWUSER)", "setns", "mount tmpfs", "ptrace PTRACE_ATTACH pid 1", "add_key", "keyctl",
	"io_uring_setup", "personality(PER_LINUX32)", "bpf", "userfaultfd", "perf_event_open",
	"socket AF_PACKET", "socket AF_NETLINK netfilter", "ioctl TIOCSTI on stdin",
}

// caller is who starts pylayer in an escape test: root, or an unprivileged user.
type caller struct {
	name string
	cred *syscall.Credential // nil: the test's own (root)
	uid  int
}

// forEachCaller runs f as a subtest for each caller, with a fresh escapeHost and a context
// that ends after timeout.
func forEachCaller(t *testing.T, timeout time.Duration, f func(ctx context.Context, t *testing.T, h *escapeHost, c caller)) {
	t.Helper()
	for _, c := range callers(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			f(ctx, t, newEscapeHost(t, c), c)
		})
	}
}

// callers are root and, when the tests run as root, nobody.
func callers(t *testing.T) []caller {
	t.Helper()
	if os.Geteuid() != 0 {
		return []caller{{name: "unprivileged", uid: os.Geteuid()}}
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("the unprivileged half of the escape suite runs as nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return []caller{
		{name: "root", uid: 0},
		{name: "unprivileged", uid: uid, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}},
	}
}

// escapeHost is a directory tree for one caller: the pylayer binary, a cache, a
// workspace, all owned by the caller and reachable by the sandbox user.
type escapeHost struct {
	c              caller
	bin, home, ws  string
	cache          string
	sandboxUID     int // the host uid sessions run as
	beforeOutsideW []string
}

func newEscapeHost(t *testing.T, c caller) *escapeHost {
	t.Helper()
	home := sharedDir(t)
	h := &escapeHost{c: c, home: home, bin: filepath.Join(home, "pylayer"), ws: filepath.Join(home, "ws"), cache: filepath.Join(home, "cache")}
	b, err := os.ReadFile(pylayer(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{h.ws, h.cache} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A root-only file the session must not read (in the old sandbox, uid 1000 was host root).
	secret := filepath.Join(h.ws, "root-only")
	if err := os.Mkdir(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.ws, "escape.py"), []byte(escapeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.cred != nil {
		for _, p := range []string{h.home, h.ws, h.cache, h.bin, filepath.Join(h.ws, "escape.py")} {
			if err := os.Lchown(p, c.uid, int(c.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.sandboxUID = c.uid
	if c.uid == 0 {
		u, err := user.Lookup("pylayer-sandbox")
		if err == nil {
			h.sandboxUID, _ = strconv.Atoi(u.Uid)
		} else {
			h.sandboxUID = -1 // made by the first run
		}
	}
	return h
}

// run runs pylayer as the caller with a cleared environment.
func (h *escapeHost) run(ctx context.Context, t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Dir = h.home
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/bin", "HOME=" + h.home, "PYLAYER_CACHE=" + h.cache, "TMPDIR=" + h.home}
	if h.c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: h.c.cred}
	}
	return runResult(t, cmd, args)
}

// outsideWorkspace lists every path of the host tree outside the workspace with its mode
// and owner, to show that a session wrote nothing there.
func (h *escapeHost) outsideWorkspace(t *testing.T) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(h.home, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if p == h.ws {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err == nil {
			st := fi.Sys().(*syscall.Stat_t)
			out = append(out, p+" "+fi.Mode().String()+" "+strconv.Itoa(int(st.Uid)))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// TestSandboxEscapes runs every attack that worked against the sandbox before it was
// hardened, from a session started by root and from one started by an unprivileged user,
// against real bwrap: each is refused, the session never runs as host root, files it
// writes are never setuid nor root's, and nothing is written outside the workspace.
func TestSandboxEscapes(t *testing.T) {
	t.Parallel()
	forEachCaller(t, 3*time.Minute, func(ctx context.Context, t *testing.T, h *escapeHost, c caller) {
		// pylayer lays out its cache on first use: that is the host's doing, not a session's.
		if r := h.run(ctx, t, "run", "--", "true"); r.code != 0 {
			t.Fatalf("a first run: exit %d\n%s", r.code, r.stderr)
		}
		before := h.outsideWorkspace(t)
		r := h.run(ctx, t, "run", "--workspace", h.ws, "--timeout", "60s", "--", "python3", "/workspace/escape.py")
		if r.code != 0 {
			t.Fatalf("escape script: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		var got map[string]struct {
			OK  bool   `json:"ok"`
			Err string `json:"err"`
		}
		if err := json.Unmarshal([]byte(lastLine(r.stdout)), &got); err != nil {
			t.Fatalf("escape script output %q: %v", r.stdout, err)
		}
		for _, a := range escapeAttacks {
			res, ok := got[a]
			switch {
			case !ok:
				t.Errorf("%s: not tried", a)
			case res.OK:
				t.Errorf("%s: SUCCEEDED (%s)", a, res.Err)
			default:
				t.Logf("%-40s refused: %s", a, res.Err)
			}
		}
		// Whatever the session created in the workspace is the sandbox user's, never
		// root's, and never setuid or setgid.
		filepath.WalkDir(h.ws, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return nil
			}
			if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Errorf("%s is %s on the host", p, fi.Mode())
			}
			st := fi.Sys().(*syscall.Stat_t)
			if created := filepath.Base(p) == "suid" || filepath.Base(p) == "suid2"; created && st.Uid == 0 {
				t.Errorf("%s, written by the session, is owned by host root", p)
			}
			return nil
		})
		if c.uid == 0 {
			fi, err := os.Stat(h.ws)
			if err != nil {
				t.Fatal(err)
			}
			if uid := fi.Sys().(*syscall.Stat_t).Uid; uid == 0 {
				t.Errorf("the workspace of root's session is still root's: sessions must run as an unprivileged user")
			}
		}
		if after := h.outsideWorkspace(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
			t.Errorf("the session changed the host outside its workspace:\nbefore:\n%s\nafter:\n%s",
				strings.Join(before, "\n"), strings.Join(after, "\n"))
		}
	})
}

// TestSandboxIdentity: a session started by root runs as an unprivileged host uid with no
// capability, inside and out.
func TestSandboxIdentity(t *testing.T) {
	t.Parallel()
	forEachCaller(t, 2*time.Minute, func(ctx context.Context, t *testing.T, h *escapeHost, c caller) {
		r := h.run(ctx, t, "run", "--workspace", h.ws, "--", "python3", "-c",
			`import os; open("/workspace/mine", "w").close(); print(os.getuid(), [l.split()[1] for l in open("/proc/self/status") if l.startswith(("CapEff", "CapPrm"))])`)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		if want := "1000 ['0000000000000000', '0000000000000000']"; strings.TrimSpace(r.stdout) != want {
			t.Errorf("inside: %q, want %q", r.stdout, want)
		}
		fi, err := os.Stat(filepath.Join(h.ws, "mine"))
		if err != nil {
			t.Fatal(err)
		}
		uid := int(fi.Sys().(*syscall.Stat_t).Uid)
		if uid == 0 {
			t.Fatalf("a file the session wrote is owned by host root")
		}
		if c.uid != 0 && uid != c.uid {
			t.Errorf("an unprivileged caller's session wrote as uid %d, want the caller's %d", uid, c.uid)
		}
	})
}

// TestSandboxLimits: each limit ends or fails the session cleanly, never the host: a fork
// bomb, an 8 GiB allocation, a /tmp fill, and a CPU-time limit. It is not parallel: it
// checks that no process of the sandbox user outlives a session, so it runs while no other
// test has sessions.
func TestSandboxLimits(t *testing.T) {
	forEachCaller(t, 3*time.Minute, func(ctx context.Context, t *testing.T, h *escapeHost, c caller) {
		tests := []struct {
			name string
			args []string
			code string
			want func(r result) bool
		}{
			{"fork bomb", []string{"--max-processes", "64", "--timeout", "20s"}, `
import os, sys
n = 0
try:
    while True:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "600"])
        n += 1
except OSError as e:
    print("forks refused after", n, e.errno == 11)
    sys.exit(0)`, func(r result) bool {
				f := strings.Fields(r.stdout)
				n, _ := strconv.Atoi(f[len(f)-2])
				return r.code == 0 && strings.HasSuffix(strings.TrimSpace(r.stdout), "True") && n < 64
			}},
			{"8 GiB allocation", nil, `
try:
    b = bytearray(8 << 30); print("allocated")
except MemoryError:
    print("MemoryError")`, func(r result) bool { return r.code == 0 && strings.TrimSpace(r.stdout) == "MemoryError" }},
			{"tmpfs fill", []string{"--tmp-size", "32MiB"}, `
import errno
n = 0
try:
    with open("/tmp/fill", "wb") as f:
        while True:
            f.write(b"\0" * (1 << 20)); f.flush(); n += 1
except OSError as e:
    print(n, e.errno == errno.ENOSPC)`, func(r result) bool {
				f := strings.Fields(r.stdout)
				n, _ := strconv.Atoi(f[0])
				return r.code == 0 && f[1] == "True" && n <= 32
			}},
			{"cpu time", []string{"--cpu-time", "1s", "--timeout", "60s"}, `
while True: pass`, func(r result) bool {
				return r.code != 0 && strings.Contains(r.stderr, "CPU time limit")
			}},
		}
		for _, tt := range tests {
			start := time.Now()
			args := append([]string{"run", "--workspace", h.ws}, tt.args...)
			r := h.run(ctx, t, append(args, "--", "python3", "-c", tt.code)...)
			if !tt.want(r) {
				t.Errorf("%s: exit %d after %s\nstdout: %s\nstderr: %s", tt.name, r.code, time.Since(start), r.stdout, r.stderr)
			}
			// Nothing of the session outlives it: the kernel tears down its pid namespace
			// once bwrap is gone, which takes a moment on a busy host.
			if h.sandboxUID > 0 {
				var left []string
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					if left = procsOf(t, h.sandboxUID); len(left) == 0 || time.Now().After(deadline) {
						break
					}
				}
				if len(left) > 0 {
					t.Errorf("%s: %d processes of the sandbox user outlive the session: %v", tt.name, len(left), left)
				}
			}
		}
	})
}

// procsOf lists the processes of host uid.
func procsOf(t *testing.T, uid int) []string {
	t.Helper()
	des, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if _, err := strconv.Atoi(de.Name()); err != nil {
			continue
		}
		fi, err := os.Stat(filepath.Join("/proc", de.Name()))
		if err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != uid {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", de.Name(), "cmdline"))
		out = append(out, de.Name()+":"+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestSandboxWorkspacePaths: a workspace is bound only through real directories the caller
// owns. A symlink planted by an earlier session (as a workspace path or one of its
// components) cannot redirect a later session's read-write mount to a host directory, and,
// for root's sessions, neither can a directory an earlier session can still change.
func TestSandboxWorkspacePaths(t *testing.T) {
	t.Parallel()
	forEachCaller(t, 2*time.Minute, func(ctx context.Context, t *testing.T, h *escapeHost, c caller) {
		// An earlier session plants links in its workspace, as it may.
		r := h.run(ctx, t, "run", "--workspace", h.ws, "--", "python3", "-c",
			`import os; os.symlink("/etc", "/workspace/etc-link"); os.makedirs("/workspace/real/sub"); os.symlink("/workspace/real", "/workspace/dir-link")`)
		if r.code != 0 {
			t.Fatalf("planting links: exit %d\n%s", r.code, r.stderr)
		}
		// The links point at host paths once the session is over: /etc, and the real directory.
		if err := os.Remove(filepath.Join(h.ws, "dir-link")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(h.ws, "real"), filepath.Join(h.ws, "dir-link")); err != nil {
			t.Fatal(err)
		}
		if c.cred != nil {
			os.Lchown(filepath.Join(h.ws, "dir-link"), c.uid, int(c.cred.Gid))
		}
		tests := []struct {
			name, ws, want string
		}{
			{"a symlink to a host directory", filepath.Join(h.ws, "etc-link"), "symbolic link"},
			{"a symlink among the components", filepath.Join(h.ws, "dir-link", "sub"), "symbolic link"},
		}
		if c.uid == 0 {
			// The earlier session's workspace belongs to the sandbox user, who could swap
			// real/sub for a link between pylayer's check and bwrap's mount.
			tests = append(tests, struct{ name, ws, want string }{"inside an earlier session's workspace", filepath.Join(h.ws, "real", "sub"), "writable by the sandbox user"})
		} else {
			root := sharedDir(t) // owned by root, not the caller
			tests = append(tests, struct{ name, ws, want string }{"a directory the caller does not own", root, "must be a directory you own"})
		}
		for _, tt := range tests {
			r := h.run(ctx, t, "run", "--workspace", tt.ws, "--", "python3", "-c", `open("/workspace/pwned", "w").close()`)
			if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("%s: exit %d, stderr %q: want a refusal that says %q", tt.name, r.code, r.stderr, tt.want)
			}
		}
		for _, p := range []string{"/etc/pwned", filepath.Join(h.ws, "real", "sub", "pwned"), filepath.Join(h.ws, "real", "pwned")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("a refused session wrote %s", p)
			}
		}
	})
}

// TestRunJSON: `run --json` prints how the run ended, with its output, as one JSON
// document, and exits with the command's status.
func TestRunJSON(t *testing.T) {
	t.Parallel()
	forEachCaller(t, 2*time.Minute, func(ctx context.Context, t *testing.T, h *escapeHost, c caller) {
		r := h.run(ctx, t, "run", "--json", "--workspace", h.ws, "--", "python3", "-c", `print("out"); import sys; print("err", file=sys.stderr); sys.exit(3)`)
		var got struct {
			ID       string `json:"id"`
			ExitCode int    `json:"exit_code"`
			TimedOut bool   `json:"timed_out"`
			Stdout   string `json:"stdout"`
			Stderr   string `json:"stderr"`
			HostUID  int    `json:"host_uid"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("run --json printed %q: %v", r.stdout, err)
		}
		if r.code != 3 || got.ExitCode != 3 || got.TimedOut || got.Stdout != "out\n" || got.Stderr != "err\n" || got.ID == "" {
			t.Errorf("exit %d, %+v", r.code, got)
		}
		if got.HostUID == 0 {
			t.Error("the session ran as host root")
		}
	})
}
