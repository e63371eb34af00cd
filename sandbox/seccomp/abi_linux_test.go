package seccomp

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSyscallNumbers compares the table of the architecture the test runs on
// with golang.org/x/sys/unix.
func TestSyscallNumbers(t *testing.T) {
	a, ok := arches[runtime.GOARCH]
	if !ok {
		if _, err := Program(runtime.GOARCH); err == nil {
			t.Fatalf("Program(%s) works without a table", runtime.GOARCH)
		}
		return
	}
	for name, nr := range a.nr {
		if want, ok := unixSysnum[name]; !ok || uintptr(nr) != want {
			t.Errorf("%s: %s is %d here, x/sys/unix says %d (known: %v)", runtime.GOARCH, name, nr, want, ok)
		}
	}
	for name := range unixSysnum {
		if _, ok := a.nr[name]; !ok {
			t.Errorf("%s: x/sys/unix has %s, the table does not", runtime.GOARCH, name)
		}
	}
	if audit := map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]; a.audit != audit {
		t.Errorf("audit arch %#x, want %#x", a.audit, audit)
	}
}

// TestABIConstants compares the values the rules and the generator write out
// with golang.org/x/sys/unix.
func TestABIConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"CLONE_NEWNS", cloneNewNS, unix.CLONE_NEWNS},
		{"CLONE_NEWCGROUP", cloneNewCgroup, unix.CLONE_NEWCGROUP},
		{"CLONE_NEWUTS", cloneNewUTS, unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", cloneNewIPC, unix.CLONE_NEWIPC},
		{"CLONE_NEWUSER", cloneNewUser, unix.CLONE_NEWUSER},
		{"CLONE_NEWPID", cloneNewPID, unix.CLONE_NEWPID},
		{"CLONE_NEWNET", cloneNewNet, unix.CLONE_NEWNET},
		{"TIOCSTI", tiocsti, unix.TIOCSTI},
		{"TIOCLINUX", tioclinux, unix.TIOCLINUX},
		{"AF_UNSPEC", afUnspec, unix.AF_UNSPEC},
		{"AF_UNIX", afUnix, unix.AF_UNIX},
		{"AF_INET", afInet, unix.AF_INET},
		{"AF_INET6", afInet6, unix.AF_INET6},
		{"AF_NETLINK", afNetlink, unix.AF_NETLINK},
		{"O_CREAT", oCreat, unix.O_CREAT},
		{"__O_TMPFILE", oTmpfile, unix.O_TMPFILE &^ unix.O_DIRECTORY},
		{"S_ISUID", sISUID, unix.S_ISUID},
		{"S_ISGID", sISGID, unix.S_ISGID},
		{"S_IFMT", sIFMT, unix.S_IFMT},
		{"S_IFSOCK", sIFSOCK, unix.S_IFSOCK},
		{"S_IFREG", sIFREG, unix.S_IFREG},
		{"S_IFIFO", sIFIFO, unix.S_IFIFO},
		{"S_IFCHR", sIFCHR, unix.S_IFCHR},
		{"S_IFBLK", sIFBLK, unix.S_IFBLK},
		{"S_IFDIR", sIFDIR, unix.S_IFDIR},
		{"EPERM", uint64(EPERM), uint64(unix.EPERM)},
		{"ENOSYS", uint64(ENOSYS), uint64(unix.ENOSYS)},
		{"EAFNOSUPPORT", uint64(EAFNOSUPPORT), uint64(unix.EAFNOSUPPORT)},
		{"BPF_LD|BPF_W|BPF_ABS", opLdAbsW, unix.BPF_LD | unix.BPF_W | unix.BPF_ABS},
		{"BPF_ALU|BPF_AND|BPF_K", opAndK, unix.BPF_ALU | unix.BPF_AND | unix.BPF_K},
		{"BPF_JMP|BPF_JEQ|BPF_K", opJeqK, unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K},
		{"BPF_JMP|BPF_JGE|BPF_K", opJgeK, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K},
		{"BPF_JMP|BPF_JSET|BPF_K", opJsetK, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K},
		{"BPF_RET|BPF_K", opRetK, unix.BPF_RET | unix.BPF_K},
		{"SECCOMP_RET_KILL_PROCESS", retKillProcess, unix.SECCOMP_RET_KILL_PROCESS},
		{"SECCOMP_RET_ERRNO", retErrno, unix.SECCOMP_RET_ERRNO},
		{"SECCOMP_RET_ALLOW", retAllow, unix.SECCOMP_RET_ALLOW},
		{"AUDIT_ARCH_I386", auditI386, unix.AUDIT_ARCH_I386},
		{"AUDIT_ARCH_ARM", auditARM, unix.AUDIT_ARCH_ARM},
		{"AUDIT_ARCH_X86_64", auditX8664, unix.AUDIT_ARCH_X86_64},
		{"AUDIT_ARCH_AARCH64", auditAArch64, unix.AUDIT_ARCH_AARCH64},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x here, x/sys/unix says %#x", c.name, c.got, c.want)
		}
	}
}
