package seccomp

import (
	"bytes"
	"errors"
	"slices"
	"sort"
	"testing"
)

var goarches = []string{"amd64", "arm64"}

const (
	auditI386    = 0x40000003
	auditARM     = 0x40000028
	auditX8664   = 0xc000003e
	auditAArch64 = 0xc00000b7

	sIFDIR = 0o040000
	sIFCHR = 0o020000
	sIFBLK = 0o060000

	oDirectoryAMD64 = 0o200000
	oDirectoryARM64 = 0o40000
	sigchld         = 17
	hi              = 1 << 32 // a high word that the kernel ignores
)

func program(t testing.TB, goarch string) []instruction {
	t.Helper()
	b, err := Program(goarch)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(prog); err != nil {
		t.Fatalf("%s program the kernel would refuse: %v", goarch, err)
	}
	return prog
}

func eval(t testing.TB, prog []instruction, d seccompData) uint32 {
	t.Helper()
	v, err := run(prog, d.bytes())
	if err != nil {
		t.Fatalf("running the filter on %+v: %v", d, err)
	}
	return v
}

func TestProgramSizeAndDeterminism(t *testing.T) {
	for _, goarch := range goarches {
		a, _ := Program(goarch)
		b, _ := Program(goarch)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two calls gave different programs", goarch)
		}
		n := len(program(t, goarch))
		t.Logf("%s: %d instructions", goarch, n)
		if n > 400 {
			t.Errorf("%s: %d instructions: far more than the rules need (the kernel's limit is 4096)", goarch, n)
		}
	}
	if _, err := Program("riscv64"); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("Program(riscv64) = %v, want ErrUnsupportedArch", err)
	}
}

// TestArch: calls through another ABI are killed before any rule applies.
func TestArch(t *testing.T) {
	amd := program(t, "amd64")
	openat := arches["amd64"].nr["openat"]
	for _, tc := range []struct {
		name     string
		arch, nr uint32
		want     uint32
	}{
		{"x86_64 openat", auditX8664, openat, retAllow},
		{"i386 (int 0x80)", auditI386, 5, retKillProcess},
		{"i386 with an x86_64 number", auditI386, openat, retKillProcess},
		{"aarch64 on x86_64", auditAArch64, openat, retKillProcess},
		{"arch 0", 0, openat, retKillProcess},
		{"x32 openat", auditX8664, x32Bit | openat, retKillProcess},
		{"x32 bit alone", auditX8664, x32Bit, retKillProcess},
		{"0x7fffffff", auditX8664, 0x7fffffff, retKillProcess},
		{"0xfffffffe", auditX8664, 0xfffffffe, retKillProcess},
		{"nr -1 (a tracer's skip: the kernel says ENOSYS)", auditX8664, 0xffffffff, retAllow},
		{"x32 mount", auditX8664, x32Bit | arches["amd64"].nr["mount"], retKillProcess},
	} {
		if got := eval(t, amd, seccompData{nr: tc.nr, arch: tc.arch}); got != tc.want {
			t.Errorf("amd64 %s: %s, want %s", tc.name, verdict(got), verdict(tc.want))
		}
	}
	arm := program(t, "arm64")
	for _, tc := range []struct {
		name     string
		arch, nr uint32
		want     uint32
	}{
		{"aarch64 openat", auditAArch64, arches["arm64"].nr["openat"], retAllow},
		{"aarch32", auditARM, 5, retKillProcess},
		{"x86_64 on arm64", auditX8664, 257, retKillProcess},
		{"bit 30 (no second table on arm64: the kernel says ENOSYS)", auditAArch64, x32Bit, retAllow},
	} {
		if got := eval(t, arm, seccompData{nr: tc.nr, arch: tc.arch}); got != tc.want {
			t.Errorf("arm64 %s: %s, want %s", tc.name, verdict(got), verdict(tc.want))
		}
	}
}

// refusedAlways is the specification of the calls refused whatever their
// arguments, written independently of Rules.
var refusedAlways = map[string]Errno{
	"syslog": EPERM, "uselib": EPERM, "acct": EPERM, "modify_ldt": EPERM, "quotactl": EPERM,
	"quotactl_fd": EPERM, "add_key": EPERM, "keyctl": EPERM, "request_key": EPERM,
	"move_pages": EPERM, "mbind": EPERM, "get_mempolicy": EPERM, "set_mempolicy": EPERM,
	"set_mempolicy_home_node": EPERM, "migrate_pages": EPERM,
	"unshare": EPERM, "setns": EPERM, "mount": EPERM, "umount2": EPERM, "pivot_root": EPERM, "chroot": EPERM,
	"open_tree": ENOSYS, "open_tree_attr": ENOSYS, "move_mount": ENOSYS, "fsopen": ENOSYS,
	"fsconfig": ENOSYS, "fsmount": ENOSYS, "fspick": ENOSYS, "mount_setattr": ENOSYS,
	"perf_event_open": EPERM, "ptrace": EPERM, "process_vm_readv": EPERM, "process_vm_writev": EPERM,
	"pidfd_getfd": EPERM, "kcmp": EPERM, "process_madvise": EPERM,
	"bpf": EPERM, "userfaultfd": EPERM, "kexec_load": EPERM, "kexec_file_load": EPERM,
	"io_uring_setup": EPERM, "io_uring_enter": EPERM, "io_uring_register": EPERM,
	"init_module": EPERM, "finit_module": EPERM, "delete_module": EPERM, "lookup_dcookie": EPERM,
	"name_to_handle_at": EPERM, "open_by_handle_at": EPERM, "iopl": EPERM, "ioperm": EPERM,
	"swapon": EPERM, "swapoff": EPERM, "reboot": EPERM,
	"settimeofday": EPERM, "clock_settime": EPERM, "adjtimex": EPERM, "clock_adjtime": EPERM,
	"clone3": ENOSYS, "openat2": ENOSYS,
}

func TestRefusedAlways(t *testing.T) {
	var unconditional []string
	for _, r := range Rules() {
		if len(r.Conds) == 0 {
			unconditional = append(unconditional, r.Syscall)
		}
	}
	want := make([]string, 0, len(refusedAlways))
	for n := range refusedAlways {
		want = append(want, n)
	}
	sort.Strings(unconditional)
	sort.Strings(want)
	if !slices.Equal(unconditional, want) {
		t.Errorf("unconditional rules %v\ndiffer from the tested list %v", unconditional, want)
	}
	for _, goarch := range goarches {
		a, prog := arches[goarch], program(t, goarch)
		for name, e := range refusedAlways {
			nr, ok := a.nr[name]
			if !ok {
				continue
			}
			for _, args := range [][6]uint64{{}, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}, {1, 2, 3, 4, 5, 6}} {
				got := eval(t, prog, seccompData{nr: nr, arch: a.audit, args: args})
				if want := retErrno | uint32(e); got != want {
					t.Errorf("%s %s%v: %s, want %s", goarch, name, args, verdict(got), e)
				}
			}
		}
	}
}

type argCase struct {
	sys  string
	args [6]uint64
	want Errno // 0: allowed
}

// argCases is the specification of the argument rules, written independently
// of Rules: each refused call next to allowed neighbours, and high words.
func argCases(goarch string) []argCase {
	oDir := uint64(oDirectoryAMD64)
	if goarch == "arm64" {
		oDir = oDirectoryARM64
	}
	const (
		oWronly  = 1
		oCreat   = 0o100
		oTmpfile = 0o20000000
		thread   = 0x3d0f00 // CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
		vfork    = 0x4100   // CLONE_VM|CLONE_VFORK
	)
	c := []argCase{
		{"clone", [6]uint64{sigchld}, 0},
		{"clone", [6]uint64{vfork | sigchld}, 0},
		{"clone", [6]uint64{thread}, 0},
		{"clone", [6]uint64{0xffffffff00000000 | sigchld}, 0},
		{"clone", [6]uint64{0x10000000 | sigchld}, EPERM}, // CLONE_NEWUSER
		{"clone", [6]uint64{0x00020000}, EPERM},           // CLONE_NEWNS
		{"clone", [6]uint64{0x02000000}, EPERM},           // CLONE_NEWCGROUP
		{"clone", [6]uint64{0x04000000}, EPERM},           // CLONE_NEWUTS
		{"clone", [6]uint64{0x08000000}, EPERM},           // CLONE_NEWIPC
		{"clone", [6]uint64{0x20000000}, EPERM},           // CLONE_NEWPID
		{"clone", [6]uint64{0x40000000 | vfork}, EPERM},   // CLONE_NEWNET
		{"clone", [6]uint64{0xdead000010000000}, EPERM},

		{"ioctl", [6]uint64{0, 0x5401}, 0}, // TCGETS
		{"ioctl", [6]uint64{0, 0x5413}, 0}, // TIOCGWINSZ
		{"ioctl", [6]uint64{0, 0x541b}, 0}, // FIONREAD
		{"ioctl", [6]uint64{0, 0x5412}, EPERM},
		{"ioctl", [6]uint64{0, 0x541c}, EPERM},
		{"ioctl", [6]uint64{0, hi | 0x5412}, EPERM},
		{"ioctl", [6]uint64{0, 0xffffffff00005412}, EPERM},
		{"ioctl", [6]uint64{0, 0xffffffff00005401}, 0},

		{"personality", [6]uint64{0}, 0},
		{"personality", [6]uint64{0xffffffff}, 0},
		{"personality", [6]uint64{^uint64(0)}, 0},
		{"personality", [6]uint64{hi}, 0},
		{"personality", [6]uint64{8}, EPERM},       // PER_LINUX32
		{"personality", [6]uint64{0x40000}, EPERM}, // ADDR_NO_RANDOMIZE
		{"personality", [6]uint64{hi | 8}, EPERM},

		{"socket", [6]uint64{0, 1}, 0},
		{"socket", [6]uint64{1, 1}, 0},
		{"socket", [6]uint64{2, 1}, 0},
		{"socket", [6]uint64{10, 1}, 0},
		{"socket", [6]uint64{16, 3}, 0},                // AF_NETLINK, NETLINK_ROUTE
		{"socket", [6]uint64{16, 3, hi}, 0},            // the kernel reads an int: NETLINK_ROUTE
		{"socket", [6]uint64{16, 3, 12}, EAFNOSUPPORT}, // NETLINK_NETFILTER
		{"socket", [6]uint64{16, 3, 9}, EAFNOSUPPORT},  // NETLINK_AUDIT
		{"socket", [6]uint64{16, 3, 15}, EAFNOSUPPORT}, // NETLINK_KOBJECT_UEVENT
		{"socket", [6]uint64{hi | 2, 1}, 0},
		{"socket", [6]uint64{17, 3}, EAFNOSUPPORT}, // AF_PACKET
		{"socket", [6]uint64{3}, EAFNOSUPPORT},
		{"socket", [6]uint64{31}, EAFNOSUPPORT}, // AF_BLUETOOTH
		{"socket", [6]uint64{38}, EAFNOSUPPORT}, // AF_ALG
		{"socket", [6]uint64{40}, EAFNOSUPPORT}, // AF_VSOCK
		{"socket", [6]uint64{44}, EAFNOSUPPORT}, // AF_XDP
		{"socket", [6]uint64{0xffffffff}, EAFNOSUPPORT},
		{"socket", [6]uint64{hi | 17}, EAFNOSUPPORT},
		{"socketpair", [6]uint64{1, 1}, 0},
		{"socketpair", [6]uint64{2, 1}, EAFNOSUPPORT},
		{"socketpair", [6]uint64{0, 1}, EAFNOSUPPORT},
		{"socketpair", [6]uint64{hi | 17}, EAFNOSUPPORT},

		{"openat", [6]uint64{0, 0, 0, 0o4755}, 0}, // mode is ignored without O_CREAT
		{"openat", [6]uint64{0, 0, oDir, 0o6777}, 0},
		{"openat", [6]uint64{0, 0, oCreat | oWronly, 0o644}, 0},
		{"openat", [6]uint64{0, 0, oCreat, 0o1777}, 0},
		{"openat", [6]uint64{0, 0, oTmpfile | oDir | 2, 0o600}, 0},
		{"openat", [6]uint64{0, 0, oCreat | oWronly, 0o4755}, EPERM},
		{"openat", [6]uint64{0, 0, oCreat, 0o2644}, EPERM},
		{"openat", [6]uint64{0, 0, oTmpfile | oDir | 2, 0o4600}, EPERM},
		{"openat", [6]uint64{0, 0, hi | oCreat, hi | 0o4755}, EPERM},
		{"openat", [6]uint64{0, 0, hi, 0o4755}, 0},
		{"openat", [6]uint64{0, 0, oCreat, 0xffffffff00000000 | 0o644}, 0},
		{"open", [6]uint64{0, oCreat | oWronly, 0o644}, 0},
		{"open", [6]uint64{0, 0, 0o4755}, 0},
		{"open", [6]uint64{0, oCreat, 0o4755}, EPERM},
		{"open", [6]uint64{0, oTmpfile | oDir, 0o2600}, EPERM},
		{"creat", [6]uint64{0, 0o644}, 0},
		{"creat", [6]uint64{0, 0o4755}, EPERM},
		{"creat", [6]uint64{0, hi | 0o2755}, EPERM},

		{"mknodat", [6]uint64{0, 0, sIFIFO | 0o644}, 0},
		{"mknodat", [6]uint64{0, 0, 0o644}, 0},
		{"mknodat", [6]uint64{0, 0, sIFREG | 0o644}, 0},
		{"mknodat", [6]uint64{0, 0, sIFSOCK | 0o755}, 0},
		{"mknodat", [6]uint64{0, 0, hi | sIFIFO | 0o644}, 0},
		{"mknodat", [6]uint64{0, 0, sIFCHR | 0o666, 0x103}, EPERM},
		{"mknodat", [6]uint64{0, 0, sIFBLK | 0o600}, EPERM},
		{"mknodat", [6]uint64{0, 0, sIFDIR | 0o755}, EPERM},
		{"mknodat", [6]uint64{0, 0, sIFIFO | 0o4644}, EPERM},
		{"mknodat", [6]uint64{0, 0, sIFREG | 0o2755}, EPERM},
		{"mknodat", [6]uint64{0, 0, hi | sIFCHR}, EPERM},
		{"mknod", [6]uint64{0, sIFIFO | 0o600}, 0},
		{"mknod", [6]uint64{0, sIFCHR | 0o600}, EPERM},
		{"mknod", [6]uint64{0, 0o4755}, EPERM},
	}
	for sys, arg := range map[string]int{"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2} {
		for _, m := range []struct {
			mode uint64
			want Errno
		}{
			{0o755, 0}, {0o644, 0}, {0o1777, 0}, {0o777, 0}, {0xffffffff00000000 | 0o755, 0},
			{0o4755, EPERM}, {0o2755, EPERM}, {0o6755, EPERM}, {0o7777, EPERM}, {hi | 0o4755, EPERM},
		} {
			var args [6]uint64
			args[arg] = m.mode
			c = append(c, argCase{sys, args, m.want})
		}
	}
	return c
}

func TestArguments(t *testing.T) {
	for _, goarch := range goarches {
		a, prog := arches[goarch], program(t, goarch)
		for _, tc := range argCases(goarch) {
			nr, ok := a.nr[tc.sys]
			if !ok {
				if !a.absent[tc.sys] {
					t.Fatalf("%s: no number for %s", goarch, tc.sys)
				}
				continue
			}
			want := uint32(retAllow)
			if tc.want != 0 {
				want = retErrno | uint32(tc.want)
			}
			if got := eval(t, prog, seccompData{nr: nr, arch: a.audit, args: tc.args}); got != want {
				t.Errorf("%s %s(%#x): %s, want %s", goarch, tc.sys, tc.args, verdict(got), verdict(want))
			}
		}
	}
}

// TestOthersAllowed: every number no rule names is allowed, whatever its
// arguments (read, write, mmap, futex, execve ...).
func TestOthersAllowed(t *testing.T) {
	for _, goarch := range goarches {
		a, prog := arches[goarch], program(t, goarch)
		named := map[uint32]bool{}
		for _, nr := range a.nr {
			named[nr] = true
		}
		for nr := uint32(0); nr < 1024; nr++ {
			if named[nr] {
				continue
			}
			for _, args := range [][6]uint64{{}, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}} {
				if got := eval(t, prog, seccompData{nr: nr, arch: a.audit, args: args}); got != retAllow {
					t.Errorf("%s nr %d: %s, want ALLOW", goarch, nr, verdict(got))
				}
			}
		}
	}
}

// TestTables: every rule's system call has a number or is known to be absent
// on each architecture, no number is used twice, and the tables hold nothing
// the rules do not use.
func TestTables(t *testing.T) {
	used := map[string]bool{}
	for _, r := range Rules() {
		used[r.Syscall] = true
		if r.Why == "" || r.Errno == 0 {
			t.Errorf("rule %s: needs a reason and an errno", r)
		}
	}
	for goarch, a := range arches {
		seen := map[uint32]string{}
		for name, nr := range a.nr {
			if !used[name] {
				t.Errorf("%s: %s in the table but in no rule", goarch, name)
			}
			if a.absent[name] {
				t.Errorf("%s: %s both numbered and absent", goarch, name)
			}
			if other, dup := seen[nr]; dup {
				t.Errorf("%s: %s and %s both %d", goarch, name, other, nr)
			}
			seen[nr] = name
		}
		for name := range used {
			if _, ok := a.nr[name]; !ok && !a.absent[name] {
				t.Errorf("%s: no number for %s", goarch, name)
			}
		}
	}
}

// TestRulesCopy: Rules hands out copies; changing one does not change the
// program.
func TestRulesCopy(t *testing.T) {
	before, _ := Program("amd64")
	r := Rules()
	r[0].Errno = 0
	r[0].Conds[0].Mask = 0
	for i := range r {
		if r[i].Syscall == "socket" {
			r[i].Conds[0].Values[0] = 17
		}
	}
	after, _ := Program("amd64")
	if !bytes.Equal(before, after) {
		t.Error("changing Rules' result changed the program")
	}
}

func TestRuleString(t *testing.T) {
	for _, r := range Rules() {
		if r.Syscall != "openat" {
			continue
		}
		if got, want := r.String(), "openat if arg2&0x400040 != 0 && arg3&0xc00 != 0 -> EPERM"; got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
		return
	}
	t.Fatal("no openat rule")
}
