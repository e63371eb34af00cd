package seccomp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// archCases are the kernel cases for calls only x86_64 has.
func archCases() []kernelCase {
	return []kernelCase{
		{"chmod 04755", unix.EPERM, func(d string) error { return sys(unix.SYS_CHMOD, ptr(touch(d, "a1")), 0o4755) }},
		{"chmod 0755", 0, func(d string) error { return sys(unix.SYS_CHMOD, ptr(touch(d, "a2")), 0o755) }},
		{"open O_CREAT 04755", unix.EPERM, func(d string) error {
			return sysFD(unix.SYS_OPEN, ptr(d+"/o3"), unix.O_CREAT|unix.O_WRONLY, 0o4755)
		}},
		{"open O_CREAT 0644", 0, func(d string) error {
			return sysFD(unix.SYS_OPEN, ptr(d+"/a3"), unix.O_CREAT|unix.O_WRONLY, 0o644)
		}},
		{"creat 02755", unix.EPERM, func(d string) error { return sysFD(unix.SYS_CREAT, ptr(d+"/o4"), 0o2755) }},
		{"creat 0644", 0, func(d string) error { return sysFD(unix.SYS_CREAT, ptr(d+"/a4"), 0o644) }},
		{"mknod S_IFCHR", unix.EPERM, func(d string) error {
			return sys(unix.SYS_MKNOD, ptr(d+"/c2"), unix.S_IFCHR|0o600, uintptr(unix.Mkdev(1, 3)))
		}},
		{"mknod S_IFIFO", 0, func(d string) error { return sys(unix.SYS_MKNOD, ptr(d+"/fifo2"), unix.S_IFIFO|0o600, 0) }},
		{"modify_ldt (read)", unix.EPERM, func(string) error {
			var buf [16]byte
			return sys(unix.SYS_MODIFY_LDT, 0, uintptr(unsafe.Pointer(&buf)), 16)
		}},
		{"iopl 0", unix.EPERM, func(string) error { return sys(unix.SYS_IOPL, 0) }},
		{"ioperm 0 bits", unix.EPERM, func(string) error { return sys(unix.SYS_IOPERM, 0, 0, 0) }},
		{"uselib NULL", unix.EPERM, func(string) error { return sys(unix.SYS_USELIB, 0) }},
		{"syscall -1 (the kernel's ENOSYS)", unix.ENOSYS, func(string) error { return sys(^uintptr(0)) }},
	}
}

// childMode "x32" makes an x32 system call, which must kill the process.
func childMode(mode string) int {
	if mode != "x32" {
		fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
		return 2
	}
	_, _, e := unix.Syscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
	fmt.Fprintf(os.Stderr, "an x32 getpid returned (errno %d) instead of killing the process\n", e)
	return 0
}

func TestKernelKillsX32(t *testing.T) {
	_, err := runChild(t, "x32")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want it killed by SIGSYS", err)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Fatalf("child ended with %v, want it killed by SIGSYS", ee)
	}
}
