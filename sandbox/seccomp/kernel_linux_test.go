//go:build linux && (amd64 || arm64)

package seccomp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel test: the test binary runs itself again as a child (TestMain
// sees childEnv), the child loads Program(runtime.GOARCH) into the kernel the
// way bwrap does (no_new_privs, then the filter) and makes each call of
// kernelCases, and prints every call's errno as JSON. The parent checks them
// against the cases' expectations. A child is needed because a filter cannot
// be removed once loaded.
const childEnv = "PYLAYER_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// kernelCase is one call made under the filter; want is the errno it must
// fail with, 0 when it must succeed. Arguments are chosen so that a call the
// filter failed to stop is harmless even for root, and mostly fails with
// another errno than the filter's.
type kernelCase struct {
	name string
	want unix.Errno
	call func(dir string) error
}

func sys(nr uintptr, args ...uintptr) error {
	var a [6]uintptr
	copy(a[:], args)
	_, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	if e != 0 {
		return e
	}
	return nil
}

// sysFD is sys for calls that return a descriptor on success.
func sysFD(nr uintptr, args ...uintptr) error {
	var a [6]uintptr
	copy(a[:], args)
	fd, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	if e != 0 {
		return e
	}
	return unix.Close(int(fd))
}

func ptr(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

const (
	atFDCWD = ^uintptr(99) // AT_FDCWD (-100) as a register
	badFD   = ^uintptr(0)  // -1
	high    = uintptr(1) << 32
)

func touch(dir, name string) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		panic(err)
	}
	return p
}

func run0(name string, args ...string) error { return exec.Command(name, args...).Run() }

func kernelCases() []kernelCase {
	cases := []kernelCase{
		{"filter loaded", 0, func(string) error {
			b, err := os.ReadFile("/proc/self/status")
			if err != nil {
				return err
			}
			if !bytes.Contains(b, []byte("\nSeccomp:\t2\n")) {
				return errors.New("/proc/self/status does not say Seccomp: 2")
			}
			return nil
		}},

		// Namespaces and mounts.
		{"unshare(CLONE_NEWUSER)", unix.EPERM, func(string) error { return unix.Unshare(unix.CLONE_NEWUSER) }},
		{"unshare(CLONE_NEWNS)", unix.EPERM, func(string) error { return unix.Unshare(unix.CLONE_NEWNS) }},
		{"clone(CLONE_NEWUSER) for /bin/true", unix.EPERM, func(string) error {
			c := exec.Command("/bin/true")
			c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
			return c.Run()
		}},
		{"clone(CLONE_NEWNET|CLONE_NEWNS) for /bin/true", unix.EPERM, func(string) error {
			c := exec.Command("/bin/true")
			c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET | unix.CLONE_NEWNS}
			return c.Run()
		}},
		{"clone3", unix.ENOSYS, func(string) error { return sys(unix.SYS_CLONE3, 0, 0) }},
		{"setns", unix.EPERM, func(string) error { return sys(unix.SYS_SETNS, badFD, 0) }},
		{"mount", unix.EPERM, func(d string) error { return unix.Mount("none", d+"/none", "tmpfs", 0, "") }},
		{"umount2", unix.EPERM, func(d string) error { return unix.Unmount(d+"/none", 0) }},
		{"pivot_root", unix.EPERM, func(d string) error { return unix.PivotRoot(d+"/none", d+"/none") }},
		{"chroot(/)", unix.EPERM, func(string) error { return unix.Chroot("/") }},
		{"fsopen", unix.ENOSYS, func(string) error { return sysFD(unix.SYS_FSOPEN, ptr("tmpfs"), unix.FSOPEN_CLOEXEC) }},
		{"open_tree", unix.ENOSYS, func(d string) error {
			return sysFD(unix.SYS_OPEN_TREE, atFDCWD, ptr(d), unix.OPEN_TREE_CLOEXEC)
		}},
		{"move_mount", unix.ENOSYS, func(string) error { return sys(unix.SYS_MOVE_MOUNT, badFD, ptr(""), badFD, ptr(""), 0) }},
		{"mount_setattr", unix.ENOSYS, func(string) error { return sys(unix.SYS_MOUNT_SETATTR, badFD, ptr(""), 0, 0, 0) }},

		// Setuid and setgid files, devices.
		{"fchmodat 04755", unix.EPERM, func(d string) error { return unix.Fchmodat(unix.AT_FDCWD, touch(d, "f1"), 0o4755, 0) }},
		{"fchmodat 02755", unix.EPERM, func(d string) error { return unix.Fchmodat(unix.AT_FDCWD, touch(d, "f2"), 0o2755, 0) }},
		{"fchmodat 1<<32|04755", unix.EPERM, func(d string) error {
			return sys(unix.SYS_FCHMODAT, atFDCWD, ptr(touch(d, "f3")), high|0o4755)
		}},
		{"fchmodat2 06755", unix.EPERM, func(d string) error {
			return sys(unix.SYS_FCHMODAT2, atFDCWD, ptr(touch(d, "f4")), 0o6755, 0)
		}},
		{"fchmod 04755", unix.EPERM, func(d string) error {
			f, err := os.Open(touch(d, "f5"))
			if err != nil {
				return err
			}
			defer f.Close()
			return unix.Fchmod(int(f.Fd()), 0o4755)
		}},
		{"openat O_CREAT 04755", unix.EPERM, func(d string) error {
			return sysFD(unix.SYS_OPENAT, atFDCWD, ptr(d+"/o1"), unix.O_CREAT|unix.O_WRONLY, 0o4755)
		}},
		{"openat O_CREAT 1<<32|02755", unix.EPERM, func(d string) error {
			return sysFD(unix.SYS_OPENAT, atFDCWD, ptr(d+"/o2"), unix.O_CREAT|unix.O_WRONLY, high|0o2755)
		}},
		{"openat O_TMPFILE 04600", unix.EPERM, func(d string) error {
			return sysFD(unix.SYS_OPENAT, atFDCWD, ptr(d), unix.O_TMPFILE|unix.O_RDWR, 0o4600)
		}},
		{"openat2", unix.ENOSYS, func(d string) error {
			fd, err := unix.Openat2(unix.AT_FDCWD, d, &unix.OpenHow{Flags: unix.O_RDONLY})
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"mknodat S_IFCHR 1:3", unix.EPERM, func(d string) error {
			return unix.Mknodat(unix.AT_FDCWD, d+"/c", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
		}},
		{"mknodat S_IFBLK", unix.EPERM, func(d string) error {
			return unix.Mknodat(unix.AT_FDCWD, d+"/b", unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0)))
		}},
		{"mknodat S_IFREG 04755", unix.EPERM, func(d string) error {
			return unix.Mknodat(unix.AT_FDCWD, d+"/r", unix.S_IFREG|0o4755, 0)
		}},

		// Terminals, sockets, personality.
		{"ioctl TIOCSTI", unix.EPERM, func(string) error { return ioctlPipe(unix.TIOCSTI) }},
		{"ioctl 1<<32|TIOCSTI", unix.EPERM, func(string) error { return ioctlPipe(high | unix.TIOCSTI) }},
		{"ioctl TIOCLINUX", unix.EPERM, func(string) error { return ioctlPipe(unix.TIOCLINUX) }},
		{"socket AF_PACKET", unix.EAFNOSUPPORT, func(string) error {
			return sysFD(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)
		}},
		{"socket 1<<32|AF_PACKET", unix.EAFNOSUPPORT, func(string) error {
			return sysFD(unix.SYS_SOCKET, high|unix.AF_PACKET, unix.SOCK_RAW, 0)
		}},
		{"socket AF_NETLINK NETLINK_NETFILTER", unix.EAFNOSUPPORT, func(string) error {
			return sysFD(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER)
		}},
		{"socket AF_VSOCK", unix.EAFNOSUPPORT, func(string) error {
			return sysFD(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
		}},
		{"socket AF_ALG", unix.EAFNOSUPPORT, func(string) error {
			return sysFD(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0)
		}},
		{"socketpair AF_INET", unix.EAFNOSUPPORT, func(string) error {
			_, err := unix.Socketpair(unix.AF_INET, unix.SOCK_STREAM, 0)
			return err
		}},
		{"personality PER_LINUX32", unix.EPERM, func(string) error { return sys(unix.SYS_PERSONALITY, 0x0008) }},
		{"personality 1<<32|PER_LINUX32", unix.EPERM, func(string) error { return sys(unix.SYS_PERSONALITY, high|0x0008) }},
		{"personality ADDR_NO_RANDOMIZE", unix.EPERM, func(string) error { return sys(unix.SYS_PERSONALITY, 0x0040000) }}, // ADDR_NO_RANDOMIZE

		// Other processes.
		{"ptrace PEEKDATA", unix.EPERM, func(string) error {
			// Not PTRACE_TRACEME: if the filter let it through, the
			// child would stop at its next signal and hang the test.
			return sys(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, 1<<30, 0, 0)
		}},
		{"process_vm_writev", unix.EPERM, func(string) error {
			return sys(unix.SYS_PROCESS_VM_WRITEV, uintptr(os.Getpid()), 0, 0, 0, 0, 0)
		}},
		{"process_vm_readv", unix.EPERM, func(string) error {
			return sys(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 0)
		}},
		{"pidfd_getfd", unix.EPERM, func(string) error { return sys(unix.SYS_PIDFD_GETFD, badFD, 0, 0) }},
		{"kcmp", unix.EPERM, func(string) error {
			return sys(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(os.Getpid()), 0, 0, 0)
		}},
		{"perf_event_open", unix.EPERM, func(string) error { return sysFD(unix.SYS_PERF_EVENT_OPEN, 0, 0, badFD, badFD, 0) }},

		// Kernel surface.
		{"io_uring_setup", unix.EPERM, func(string) error {
			var p [120]byte // struct io_uring_params
			return sysFD(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p)))
		}},
		{"io_uring_enter", unix.EPERM, func(string) error { return sys(unix.SYS_IO_URING_ENTER, badFD, 0, 0, 0, 0, 0) }},
		{"bpf", unix.EPERM, func(string) error { return sysFD(unix.SYS_BPF, unix.BPF_PROG_LOAD, 0, 0) }},
		{"userfaultfd", unix.EPERM, func(string) error { return sysFD(unix.SYS_USERFAULTFD, unix.O_CLOEXEC) }},
		{"keyctl", unix.EPERM, func(string) error {
			_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0, 0)
			return err
		}},
		{"add_key", unix.EPERM, func(string) error {
			_, err := unix.AddKey("user", "pylayer-seccomp-test", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
			return err
		}},
		{"request_key", unix.EPERM, func(string) error {
			_, err := unix.RequestKey("user", "pylayer-seccomp-test", "", unix.KEY_SPEC_PROCESS_KEYRING)
			return err
		}},
		{"get_mempolicy", unix.EPERM, func(string) error { return sys(unix.SYS_GET_MEMPOLICY, 0, 0, 0, 0, 0) }},
		{"init_module", unix.EPERM, func(string) error { return sys(unix.SYS_INIT_MODULE, 0, 0, ptr("")) }},
		{"finit_module", unix.EPERM, func(string) error { return sys(unix.SYS_FINIT_MODULE, badFD, ptr(""), 0) }},
		{"delete_module", unix.EPERM, func(string) error {
			return sys(unix.SYS_DELETE_MODULE, ptr("pylayer_seccomp_none"), unix.O_NONBLOCK)
		}},
		// Flags naming no architecture: EINVAL if the filter let it through.
		{"kexec_load", unix.EPERM, func(string) error { return sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xdead0000) }},
		{"lookup_dcookie", unix.EPERM, func(string) error { return sys(unix.SYS_LOOKUP_DCOOKIE, 0, 0, 0) }},
		{"open_by_handle_at", unix.EPERM, func(string) error { return sys(unix.SYS_OPEN_BY_HANDLE_AT, badFD, 0, 0) }},

		// System state. Arguments the kernel would refuse or that change
		// nothing: NULL paths, bad magic, a clock that does not exist.
		{"syslog SIZE_BUFFER", unix.EPERM, func(string) error { return sys(unix.SYS_SYSLOG, 10, 0, 0) }},
		{"acct", unix.EPERM, func(d string) error { return sys(unix.SYS_ACCT, ptr(d+"/none/acct")) }},
		{"swapon", unix.EPERM, func(string) error { return sys(unix.SYS_SWAPON, 0, 0) }},
		{"reboot bad magic", unix.EPERM, func(string) error { return sys(unix.SYS_REBOOT, 0, 0, 0, 0) }},
		{"settimeofday(NULL, NULL)", unix.EPERM, func(string) error { return sys(unix.SYS_SETTIMEOFDAY, 0, 0) }},
		{"clock_settime(-1)", unix.EPERM, func(string) error { return sys(unix.SYS_CLOCK_SETTIME, badFD, 0) }},
		{"adjtimex (read)", unix.EPERM, func(string) error {
			var tx unix.Timex
			return sys(unix.SYS_ADJTIMEX, uintptr(unsafe.Pointer(&tx)))
		}},

		// What ordinary programs do.
		{"fchmodat 0755", 0, func(d string) error { return unix.Fchmodat(unix.AT_FDCWD, touch(d, "ok1"), 0o755, 0) }},
		{"fchmodat 1<<32|0755", 0, func(d string) error { return sys(unix.SYS_FCHMODAT, atFDCWD, ptr(touch(d, "ok2")), high|0o755) }},
		{"fchmodat 01777", 0, func(d string) error { return unix.Fchmodat(unix.AT_FDCWD, touch(d, "ok3"), 0o1777, 0) }},
		{"os.Chmod 0700", 0, func(d string) error { return os.Chmod(touch(d, "ok4"), 0o700) }},
		{"openat O_CREAT 0644", 0, func(d string) error {
			return sysFD(unix.SYS_OPENAT, atFDCWD, ptr(d+"/ok5"), unix.O_CREAT|unix.O_WRONLY, 0o644)
		}},
		{"openat O_RDONLY, mode 04755 ignored", 0, func(d string) error {
			return sysFD(unix.SYS_OPENAT, atFDCWD, ptr(touch(d, "ok6")), unix.O_RDONLY, 0o4755)
		}},
		{"mkfifo", 0, func(d string) error { return unix.Mkfifo(d+"/fifo", 0o644) }},
		{"mknodat S_IFREG 0644", 0, func(d string) error { return unix.Mknodat(unix.AT_FDCWD, d+"/reg", unix.S_IFREG|0o644, 0) }},
		{"ioctl TCGETS on a pipe (the kernel's ENOTTY)", unix.ENOTTY, func(string) error { return ioctlPipe(unix.TCGETS) }},
		{"socket AF_UNIX", 0, func(string) error { return sysFD(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0) }},
		{"socket AF_NETLINK", 0, func(string) error {
			return sysFD(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)
		}},
		{"socket 1<<32|AF_INET", 0, func(string) error { return sysFD(unix.SYS_SOCKET, high|unix.AF_INET, unix.SOCK_STREAM, 0) }},
		{"socketpair AF_UNIX", 0, func(string) error {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err == nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
			}
			return err
		}},
		{"personality query", 0, func(string) error { return sys(unix.SYS_PERSONALITY, 0xffffffff) }},
		{"personality PER_LINUX", 0, func(string) error { return sys(unix.SYS_PERSONALITY, 0) }},
		{"TCP on loopback", 0, func(string) error { return loopback() }},
		{"threads", 0, func(string) error { return threads() }},
		{"fork and exec /bin/true", 0, func(string) error { return run0("/bin/true") }},
		{"/bin/sh: fork, pipe, mkfifo, chmod", 0, func(d string) error {
			return run0("/bin/sh", "-c", `cd "$1" && true | cat && mkfifo sh.fifo && : > sh.f && chmod 755 sh.f && ! chmod 4755 sh.f 2>/dev/null`, "sh", d)
		}},
	}
	return append(cases, archCases()...)
}

func ioctlPipe(req uintptr) error {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	c := byte('x')
	return sys(unix.SYS_IOCTL, uintptr(p[0]), req, uintptr(unsafe.Pointer(&c)))
}

func loopback() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return fmt.Errorf("echo returned %q", buf)
	}
	return nil
}

// threads has more goroutines locked to their own OS thread at once than
// the process had threads, so the runtime must clone new ones under the
// filter.
func threads() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	var before int
	for _, line := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(line, "Threads:"); ok {
			fmt.Sscan(n, &before)
		}
	}
	n := before + 2
	var (
		mu      sync.Mutex
		tids    = map[int]bool{}
		started sync.WaitGroup
		release = make(chan struct{})
		done    sync.WaitGroup
	)
	started.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			mu.Lock()
			tids[unix.Gettid()] = true
			mu.Unlock()
			started.Done()
			<-release
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	if len(tids) != n {
		return fmt.Errorf("%d locked goroutines ran on %d threads", n, len(tids))
	}
	return nil
}

func child(mode string) int {
	dir, ok := strings.CutPrefix(mode, "cases:")
	runtime.LockOSThread()
	if err := load(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if !ok {
		return childMode(mode)
	}
	got := map[string]int{}
	for _, c := range kernelCases() {
		err := c.call(dir)
		var e unix.Errno
		switch {
		case err == nil:
			got[c.name] = 0
		case errors.As(err, &e):
			got[c.name] = int(e)
		default:
			fmt.Fprintf(os.Stderr, "%s: %v\n", c.name, err)
			got[c.name] = -1
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(got); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// load installs Program(runtime.GOARCH) in all threads of the process, as
// bwrap does for the sandboxed command (bwrap uses prctl(PR_SET_SECCOMP)).
func load() error {
	b, err := Program(runtime.GOARCH)
	if err != nil {
		return err
	}
	filters := make([]unix.SockFilter, len(b)/8)
	for i := range filters {
		p := b[8*i:]
		filters[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(p), Jt: p[2], Jf: p[3], K: binary.NativeEndian.Uint32(p[4:])}
	}
	// A killed child must not leave a core file behind.
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("RLIMIT_CORE: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_DUMPABLE: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", e)
	}
	if r != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): thread %d could not be synchronized", r)
	}
	return nil
}

// runChild runs the test binary as a child in mode.
func runChild(t *testing.T, mode string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if stderr.Len() > 0 {
		t.Logf("child stderr:\n%s", stderr.Bytes())
	}
	return out, err
}

func TestKernel(t *testing.T) {
	dir := t.TempDir()
	out, err := runChild(t, "cases:"+dir)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var got map[string]int
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	cases := kernelCases()
	for _, c := range cases {
		g, ok := got[c.name]
		switch {
		case !ok:
			t.Errorf("%s: no result", c.name)
		case g != int(c.want):
			t.Errorf("%s: %s, want %s", c.name, errnoName(g), errnoName(int(c.want)))
		}
	}
	if len(got) != len(cases) {
		t.Errorf("%d results for %d cases: two cases share a name", len(got), len(cases))
	}
	for _, name := range []string{"c", "b", "r", "o1", "o2"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: a refused call left a file behind (%v)", name, err)
		}
	}
	for _, name := range []string{"f1", "f2", "f3", "f4", "f5"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s: want a file without setuid/setgid bits, got %v, %v", name, fi.Mode(), err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dir, "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("mkfifo under the filter made no FIFO: %v", err)
	}
}

func errnoName(e int) string {
	switch e {
	case 0:
		return "success"
	case -1:
		return "an error without errno (see the child's stderr)"
	}
	return unix.ErrnoName(unix.Errno(e))
}
