package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/sandbox/seccomp"
)

// seccompCall is one refused system call, tried from inside a session.
type seccompCall struct {
	Name  string    `json:"name"`
	Rule  string    `json:"rule"`
	Nr    uint32    `json:"nr"`
	Args  [6]uint64 `json:"args"`
	Errno int       `json:"errno"`
}

// seccompCalls turns every rule of the filter into a call that the rule must refuse:
// arguments that meet its conditions, pointers NULL, so that the call would fail
// harmlessly (EFAULT, EINVAL) if it ever reached the kernel.
func seccompCalls(t *testing.T) []seccompCall {
	t.Helper()
	var out []seccompCall
	for _, r := range seccomp.Rules() {
		nr, ok := seccomp.Number(runtime.GOARCH, r.Syscall)
		if !ok {
			continue // not on this architecture
		}
		c := seccompCall{Name: r.Syscall, Rule: r.String(), Nr: nr, Errno: int(r.Errno)}
		for _, cond := range r.Conds {
			var v uint32
			switch cond.Op {
			case seccomp.HasAny:
				v = cond.Mask & -cond.Mask // its lowest bit
			case seccomp.In:
				v = cond.Values[0]
			case seccomp.NotIn:
				for v = 0xdead; contains(cond.Values, v&cond.Mask); v++ {
				}
			}
			c.Args[cond.Arg] |= uint64(v)
		}
		if r.Syscall == "clone" {
			c.Args[0] |= 0x10000 // CLONE_THREAD without CLONE_SIGHAND: EINVAL past the filter, never a child
		}
		out = append(out, c)
	}
	if len(out) < 40 {
		t.Fatalf("only %d rules resolve on %s", len(out), runtime.GOARCH)
	}
	return out
}

func contains(vs []uint32, v uint32) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// seccompScript makes each call, then ordinary work, and prints the results as JSON.
const seccompScript = `
import concurrent.futures, ctypes, hashlib, json, os, re, socket, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = json.loads(sys.argv[1])
got = []
for c in calls:
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(c["nr"]), *[ctypes.c_ulong(a) for a in c["args"]])
    got.append({"name": c["name"], "ret": r, "errno": ctypes.get_errno() if r < 0 else 0})
work = {}
def job(name, f):
    try:
        work[name] = f()
    except BaseException as e:
        work[name] = "FAILED: %s: %s" % (type(e).__name__, e)
job("seccomp mode", lambda: [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
job("stdlib", lambda: hashlib.sha256(json.dumps([re.sub("a", "b", "a" * i) for i in range(200)]).encode()).hexdigest()[:8])
job("subprocess", lambda: subprocess.run(["/bin/sh", "-c", "echo $((6*7)) | cat"], capture_output=True, text=True, check=True).stdout.strip())
job("threads", lambda: sum(concurrent.futures.ThreadPoolExecutor(4).map(lambda x: x * x, range(100))))
def loopback():
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    def serve():
        conn, _ = srv.accept(); conn.sendall(conn.recv(5).upper()); conn.close()
    th = threading.Thread(target=serve); th.start()
    cli = socket.create_connection(srv.getsockname()); cli.sendall(b"hello"); data = cli.recv(5); th.join()
    return data.decode()
job("loopback", loopback)
def fifo():
    os.mkfifo("/tmp/f"); os.chmod("/tmp/f", 0o644); return oct(os.stat("/tmp/f").st_mode & 0o777)
job("mkfifo", fifo)
def chmod755():
    open("/workspace/x.sh", "w").write("#!/bin/sh\necho ran\n"); os.chmod("/workspace/x.sh", 0o755)
    return subprocess.run(["/workspace/x.sh"], capture_output=True, text=True).stdout.strip()
job("chmod 0755 and exec", chmod755)
job("netlink route", lambda: ",".join(n for _, n in socket.if_nameindex()))
print(json.dumps({"calls": got, "work": work}))
`

// TestSeccompInSession makes every system call the filter refuses from inside a real
// session and sees each refused with the rule's errno, while ordinary Python work
// (stdlib, subprocess, threads, loopback sockets, FIFOs, chmod 0755, netlink route) still runs.
func TestSeccompInSession(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	calls := seccompCalls(t)
	arg, err := json.Marshal(calls)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range callers(t) {
		t.Run(c.name, func(t *testing.T) {
			h := newEscapeHost(t, c)
			r := h.run(ctx, t, "run", "--workspace", h.ws, "--", "python3", "-c", seccompScript, string(arg))
			if r.code != 0 {
				t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			var out struct {
				Calls []struct {
					Name  string `json:"name"`
					Ret   int64  `json:"ret"`
					Errno int    `json:"errno"`
				} `json:"calls"`
				Work map[string]any `json:"work"`
			}
			if err := json.Unmarshal([]byte(lastLine(r.stdout)), &out); err != nil {
				t.Fatalf("%v: %s", err, r.stdout)
			}
			if len(out.Calls) != len(calls) {
				t.Fatalf("%d results for %d calls", len(out.Calls), len(calls))
			}
			for i, g := range out.Calls {
				if g.Ret != -1 || g.Errno != calls[i].Errno {
					t.Errorf("%s (%s): returned %d errno %d, want -1 errno %d", calls[i].Name, calls[i].Rule, g.Ret, g.Errno, calls[i].Errno)
				}
			}
			want := map[string]string{"seccomp mode": "2", "stdlib": "", "subprocess": "42", "threads": "328350",
				"loopback": "HELLO", "mkfifo": "0o644", "chmod 0755 and exec": "ran", "netlink route": "lo"}
			for k, w := range want {
				got := fmt.Sprint(out.Work[k])
				if strings.HasPrefix(got, "FAILED") || (w != "" && got != w) {
					t.Errorf("%s: %s, want %q", k, got, w)
				}
			}
			t.Logf("%d refused system calls, ordinary work: %v", len(calls), out.Work)
		})
	}
}
