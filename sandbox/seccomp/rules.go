package seccomp

import (
	"fmt"
	"strconv"
	"strings"
)

// Errno is a Linux error number (the same on amd64 and arm64, whatever the
// build OS): the value a refused system call returns, as -1 with errno set.
type Errno uint16

// The errnos the filter returns.
const (
	EPERM        Errno = 1  // the call is not allowed in the sandbox
	ENOSYS       Errno = 38 // "no such call": glibc and others fall back to an older call
	EAFNOSUPPORT Errno = 97 // the socket family is not available
)

var errnoNames = map[Errno]string{EPERM: "EPERM", ENOSYS: "ENOSYS", EAFNOSUPPORT: "EAFNOSUPPORT"}

func (e Errno) String() string {
	if s, ok := errnoNames[e]; ok {
		return s
	}
	return "errno " + strconv.Itoa(int(e))
}

// Op is how a Cond compares an argument.
type Op uint8

const (
	// HasAny holds when arg&Mask != 0.
	HasAny Op = iota + 1
	// In holds when arg&Mask is one of Values.
	In
	// NotIn holds when arg&Mask is none of Values.
	NotIn
)

// Cond is a test on the low 32 bits of one system call argument. Every
// argument the rules test is an int, unsigned int or umode_t in the kernel's
// SYSCALL_DEFINE, or (clone's flags) is read through lower_32_bits: the kernel
// truncates the 64-bit register before using it, so the high word cannot change
// what the call does and the filter ignores it, exactly as the kernel does. (A
// filter that compared all 64 bits would be the one with a hole:
// chmod(f, 1<<32|04755) sets the setuid bit.)
type Cond struct {
	Arg    int // 0 to 5
	Op     Op
	Mask   uint32
	Values []uint32 // for In and NotIn
}

func (c Cond) String() string {
	v := "arg" + strconv.Itoa(c.Arg)
	if c.Mask != 0xffffffff {
		v += "&" + hex(c.Mask)
	}
	switch c.Op {
	case HasAny:
		return v + " != 0"
	case In, NotIn:
		vals := make([]string, len(c.Values))
		for i, x := range c.Values {
			vals[i] = hex(x)
		}
		op := " in {"
		if c.Op == NotIn {
			op = " not in {"
		}
		return v + op + strings.Join(vals, ", ") + "}"
	}
	return v + " ?"
}

func hex(x uint32) string { return "0x" + strconv.FormatUint(uint64(x), 16) }

// Rule refuses a system call with Errno: every call when Conds is empty,
// otherwise the calls whose arguments satisfy all of Conds.
type Rule struct {
	Syscall string // name in the kernel's syscall table, e.g. "clone"
	Conds   []Cond
	Errno   Errno
	Why     string
}

func (r Rule) String() string {
	s := r.Syscall
	if len(r.Conds) > 0 {
		cs := make([]string, len(r.Conds))
		for i, c := range r.Conds {
			cs[i] = c.String()
		}
		s += " if " + strings.Join(cs, " && ")
	}
	return fmt.Sprintf("%s -> %s", s, r.Errno)
}

// whyNetlink: beyond Flatpak, which allows every netlink protocol.
const whyNetlink = "netlink sockets other than NETLINK_ROUTE (which getaddrinfo and if_nameindex use) talk to " +
	"kernel subsystems a session has no business with: netfilter, audit, xfrm, connector, uevents"

// Linux ABI values the rules use: the same on amd64 and arm64 (asm-generic),
// checked against golang.org/x/sys/unix by the tests. They are written out
// rather than taken from x/sys/unix so that the package builds, and Program
// works, on every GOOS and for either GOARCH.
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
	// cloneNewAny is every CLONE_NEW* flag clone(2) accepts. CLONE_NEWTIME
	// (0x80) shares its bit with the exit signal there and works only with
	// clone3, which is refused as a whole.
	cloneNewAny = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC | cloneNewUser | cloneNewPID | cloneNewNet

	tiocsti   = 0x5412
	tioclinux = 0x541c

	afUnspec     = 0
	afUnix       = 1
	afInet       = 2
	afInet6      = 10
	afNetlink    = 16
	netlinkRoute = 0 // NETLINK_ROUTE

	perLinux     = 0
	personaQuery = 0xffffffff

	oCreat = 0x40
	// oTmpfile is __O_TMPFILE, the bit the kernel tests (O_TMPFILE is it plus
	// O_DIRECTORY, whose value differs between amd64 and arm64).
	oTmpfile = 0x400000

	sISUID  = 0o4000
	sISGID  = 0o2000
	sIFMT   = 0o170000
	sIFSOCK = 0o140000
	sIFREG  = 0o100000
	sIFIFO  = 0o010000
	setID   = sISUID | sISGID
)

// Rules returns the filter's rules, in the order Program tests them (the first
// that matches decides). The result is a fresh copy the caller may change.
//
// Every system call no rule refuses is allowed, and so is every call of a
// listed one whose arguments miss its Conds.
func Rules() []Rule {
	hasSetID := func(arg int) Cond { return Cond{Arg: arg, Op: HasAny, Mask: setID} }
	creates := func(arg int) Cond { return Cond{Arg: arg, Op: HasAny, Mask: oCreat | oTmpfile} }
	notFileType := func(arg int) Cond {
		return Cond{Arg: arg, Op: NotIn, Mask: sIFMT, Values: []uint32{0, sIFREG, sIFIFO, sIFSOCK}}
	}
	const (
		whySetID = "a setuid or setgid file made in the read-write workspace keeps its bits on the host, " +
			"owned by the host user the sandbox uid maps to (root when pylayer runs as root)"
		whyDev      = "device nodes give raw access to hardware and kernel interfaces; FIFOs, sockets and regular files stay allowed"
		whyNS       = "new namespaces (a user namespace above all) hand the sandbox capabilities over kernel code that is a steady source of privilege escalations (nf_tables, overlayfs ...), and mounts could rearrange the sandbox's view"
		whyMountAPI = "the new mount API changes the mount tree like mount(2); ENOSYS as Flatpak, so callers fall back to calls that are refused too"
		whyTrace    = "reading or changing another process's memory, descriptors or state: ptrace and its siblings, which a Python program has no use for and which would let one sandboxed process subvert another"
		whyKeys     = "the kernel keyring is not namespaced: keys could leak between sessions of one uid"
		whyNUMA     = "NUMA memory policy calls: little use in a sandbox, a history of kernel bugs (Flatpak blocks them too)"
		whyModule   = "loading kernel code"
		whySurface  = "large kernel attack surface, a long list of CVEs, nothing ordinary Python needs"
		whySystem   = "changes or reads system-wide state the sandbox has no business with"
		whyObsolete = "obsolete or hardware-level interface, a historic source of bugs and leaks"
		whyHandle   = "file handles open files by inode, bypassing the sandbox's mount view (the 'shocker' container escape)"
		whyTTY      = "pushes characters into the terminal's input, i.e. types commands into the shell outside the sandbox (CVE-2017-5226, CVE-2023-28100); compares the low 32 bits only, as the kernel does (CVE-2019-10063)"
		whyPointer  = "its arguments sit behind a pointer the filter cannot read; ENOSYS so glibc and others fall back to the older call, whose arguments are checked"
		whyPersona  = "execution domains other than Linux change syscall semantics and weaken ASLR (ADDR_NO_RANDOMIZE); querying (0xffffffff) stays allowed"
		whySocket   = "only local, IP and netlink sockets: packet, bluetooth, vsock, alg, xdp ... sockets reach kernel code a Python program does not need"
		whySocketpr = "socketpair works for AF_UNIX only; any other family would create sockets of the families socket(2) refuses"
		whyIOUring  = whySurface + " (Docker's default profile refuses it too); also a way around this filter: io_uring opens files and more without making the system calls the filter sees"
		whyTime     = "sets the host's clock"
	)
	u := func(name string, e Errno, why string) Rule { return Rule{Syscall: name, Errno: e, Why: why} }

	return []Rule{
		// Argument rules come first: openat and ioctl are hot, and every
		// call whose verdict depends on no argument is answered from the
		// kernel's per-syscall cache (Linux 5.11+) without running the filter.
		{Syscall: "openat", Conds: []Cond{creates(2), hasSetID(3)}, Errno: EPERM, Why: whySetID},
		{Syscall: "open", Conds: []Cond{creates(1), hasSetID(2)}, Errno: EPERM, Why: whySetID},
		{Syscall: "creat", Conds: []Cond{hasSetID(1)}, Errno: EPERM, Why: whySetID},
		u("openat2", ENOSYS, whyPointer+" (its mode, which may carry setuid bits, is in struct open_how)"),
		{Syscall: "ioctl", Conds: []Cond{{Arg: 1, Op: In, Mask: 0xffffffff, Values: []uint32{tiocsti}}}, Errno: EPERM, Why: whyTTY},
		{Syscall: "ioctl", Conds: []Cond{{Arg: 1, Op: In, Mask: 0xffffffff, Values: []uint32{tioclinux}}}, Errno: EPERM, Why: "TIOCLINUX copy and paste on a virtual console works like TIOCSTI (CVE-2023-28100)"},
		{Syscall: "fchmodat", Conds: []Cond{hasSetID(2)}, Errno: EPERM, Why: whySetID},
		{Syscall: "fchmod", Conds: []Cond{hasSetID(1)}, Errno: EPERM, Why: whySetID},
		{Syscall: "chmod", Conds: []Cond{hasSetID(1)}, Errno: EPERM, Why: whySetID},
		{Syscall: "fchmodat2", Conds: []Cond{hasSetID(2)}, Errno: EPERM, Why: whySetID},
		{Syscall: "clone", Conds: []Cond{{Arg: 0, Op: HasAny, Mask: cloneNewAny}}, Errno: EPERM, Why: whyNS + "; threads, fork and vfork (no CLONE_NEW* flag) stay allowed"},
		u("clone3", ENOSYS, whyPointer+" (its flags are in struct clone_args; glibc falls back to clone, as under Flatpak)"),
		{Syscall: "socket", Conds: []Cond{{Arg: 0, Op: NotIn, Mask: 0xffffffff, Values: []uint32{afUnspec, afUnix, afInet, afInet6, afNetlink}}}, Errno: EAFNOSUPPORT, Why: whySocket},
		{Syscall: "socket", Conds: []Cond{{Arg: 0, Op: In, Mask: 0xffffffff, Values: []uint32{afNetlink}},
			{Arg: 2, Op: NotIn, Mask: 0xffffffff, Values: []uint32{netlinkRoute}}}, Errno: EAFNOSUPPORT, Why: whyNetlink},
		{Syscall: "socketpair", Conds: []Cond{{Arg: 0, Op: NotIn, Mask: 0xffffffff, Values: []uint32{afUnix}}}, Errno: EAFNOSUPPORT, Why: whySocketpr},
		{Syscall: "mknodat", Conds: []Cond{notFileType(2)}, Errno: EPERM, Why: whyDev},
		{Syscall: "mknodat", Conds: []Cond{hasSetID(2)}, Errno: EPERM, Why: whySetID},
		{Syscall: "mknod", Conds: []Cond{notFileType(1)}, Errno: EPERM, Why: whyDev},
		{Syscall: "mknod", Conds: []Cond{hasSetID(1)}, Errno: EPERM, Why: whySetID},
		{Syscall: "personality", Conds: []Cond{{Arg: 0, Op: NotIn, Mask: 0xffffffff, Values: []uint32{perLinux, personaQuery}}}, Errno: EPERM, Why: whyPersona},

		// Namespaces and mounts.
		u("unshare", EPERM, whyNS),
		u("setns", EPERM, whyNS),
		u("mount", EPERM, whyNS),
		u("umount2", EPERM, whyNS),
		u("pivot_root", EPERM, whyNS),
		u("chroot", EPERM, whyNS),
		u("open_tree", ENOSYS, whyMountAPI),
		u("open_tree_attr", ENOSYS, whyMountAPI),
		u("move_mount", ENOSYS, whyMountAPI),
		u("fsopen", ENOSYS, whyMountAPI),
		u("fsconfig", ENOSYS, whyMountAPI),
		u("fsmount", ENOSYS, whyMountAPI),
		u("fspick", ENOSYS, whyMountAPI),
		u("mount_setattr", ENOSYS, whyMountAPI),

		// Other processes.
		u("ptrace", EPERM, whyTrace),
		u("process_vm_readv", EPERM, whyTrace),
		u("process_vm_writev", EPERM, whyTrace),
		u("pidfd_getfd", EPERM, whyTrace),
		u("kcmp", EPERM, whyTrace),
		u("process_madvise", EPERM, whyTrace),
		u("perf_event_open", EPERM, "profiling belongs outside the sandbox; perf has been the source of many CVEs"),

		// Kernel attack surface and kernel code.
		u("bpf", EPERM, whySurface),
		u("userfaultfd", EPERM, whySurface+"; it makes kernel races easy to win"),
		u("io_uring_setup", EPERM, whyIOUring),
		u("io_uring_enter", EPERM, whyIOUring),
		u("io_uring_register", EPERM, whyIOUring),
		u("init_module", EPERM, whyModule),
		u("finit_module", EPERM, whyModule),
		u("delete_module", EPERM, whyModule),
		u("kexec_load", EPERM, whyModule),
		u("kexec_file_load", EPERM, whyModule),
		u("add_key", EPERM, whyKeys),
		u("keyctl", EPERM, whyKeys),
		u("request_key", EPERM, whyKeys),
		u("move_pages", EPERM, whyNUMA),
		u("mbind", EPERM, whyNUMA),
		u("get_mempolicy", EPERM, whyNUMA),
		u("set_mempolicy", EPERM, whyNUMA),
		u("set_mempolicy_home_node", EPERM, whyNUMA),
		u("migrate_pages", EPERM, whyNUMA),

		// System-wide state.
		u("syslog", EPERM, "the kernel log (dmesg) leaks addresses and other sessions' activity"),
		u("acct", EPERM, whySystem),
		u("quotactl", EPERM, whySystem),
		u("quotactl_fd", EPERM, whySystem),
		u("swapon", EPERM, whySystem),
		u("swapoff", EPERM, whySystem),
		u("reboot", EPERM, whySystem),
		u("settimeofday", EPERM, whyTime),
		u("clock_settime", EPERM, whyTime),
		u("adjtimex", EPERM, whyTime),
		u("clock_adjtime", EPERM, whyTime),

		// Obsolete and hardware-level interfaces.
		u("uselib", EPERM, whyObsolete),
		u("modify_ldt", EPERM, whyObsolete+" (16-bit code)"),
		u("iopl", EPERM, whyObsolete+" (I/O ports)"),
		u("ioperm", EPERM, whyObsolete+" (I/O ports)"),
		u("lookup_dcookie", EPERM, whyObsolete),
		u("name_to_handle_at", EPERM, whyHandle),
		u("open_by_handle_at", EPERM, whyHandle),
	}
}
