// Package seccomp generates the seccomp filter of pylayer's sandboxes: a
// classic BPF program that bwrap loads (--seccomp FD or --add-seccomp-fd FD)
// just before it executes the sandboxed command, so that the command and
// everything it starts run under it.
//
// Namespaces, read-only mounts and dropped capabilities already confine the
// sandbox; the filter takes away the kernel interfaces that would let code
// inside step around them, or attack the kernel itself, and that ordinary
// Python (threads, subprocess, sockets on loopback, mmap, FIFOs, chmod 0755)
// never needs. Everything else is allowed: it is a deny list, like Flatpak's
// and Docker's, because an allow list breaks whatever native code a wheel
// brings with it.
//
// # What it refuses
//
// At least what Flatpak's setup_seccomp refuses, with Flatpak's errnos, and
// more. Rules lists every rule with its reason; in short:
//
//   - Another ABI: on x86_64 only AUDIT_ARCH_X86_64 calls pass; i386 calls
//     (int 0x80) and x32 calls (bit 30 set in the number) kill the process,
//     as libseccomp's default bad-arch action does under Flatpak. Their
//     numbers are not the ones the rules were resolved with, so a filter that
//     let them through would be bypassed by a single instruction; an errno
//     would let a probing program carry on, a kill shows in the exit status
//     (SIGSYS). On arm64 only AUDIT_ARCH_AARCH64 passes. vm86 and vm86old
//     exist only in the i386 table and are refused with it.
//   - New namespaces and mounts: unshare, setns, clone with any CLONE_NEW*
//     flag, mount, umount2, pivot_root, chroot (EPERM) and the new mount API,
//     open_tree to mount_setattr (ENOSYS, as Flatpak). A new user namespace
//     would give the sandbox every capability over freshly made namespaces
//     and so reach kernel code (nf_tables, overlayfs ...) that has been a
//     steady source of privilege escalations.
//   - Calls whose arguments the filter cannot see, behind pointers: clone3 and
//     openat2 return ENOSYS, so glibc falls back to clone and openat, whose
//     arguments are checked.
//   - Setuid and setgid files, which Flatpak allows: chmod, fchmod, fchmodat,
//     fchmodat2 with S_ISUID or S_ISGID in the mode; open, openat and creat
//     creating a file (O_CREAT or O_TMPFILE) with such a mode; mknod and
//     mknodat with such a mode or of a device (FIFOs, sockets and regular
//     files stay allowed). The workspace is the host's directory, bound
//     read-write: a setuid file made there is a setuid file on the host,
//     owned by the host user the sandbox's uid maps to. (mkdir clears both
//     bits by itself; chmod g+s on a directory is refused too, which costs
//     little.) Copying a setuid file with its mode (cp -p, shutil.copy2)
//     fails with EPERM.
//   - Terminal input injection: ioctl TIOCSTI and TIOCLINUX (EPERM).
//   - Sockets other than AF_UNIX, AF_INET, AF_INET6, AF_NETLINK and AF_UNSPEC
//     (EAFNOSUPPORT as Flatpak; AF_PACKET among them); socketpair other than
//     AF_UNIX; and, beyond Flatpak, netlink sockets of any protocol but
//     NETLINK_ROUTE, which getaddrinfo and if_nameindex need (netfilter,
//     audit, xfrm and uevent sockets reach subsystems a session has no use
//     for).
//   - personality other than PER_LINUX or the 0xffffffff query (EPERM, the
//     errno Flatpak uses; Flatpak refuses the query too, which is harmless
//     and allowed here).
//   - Other processes: ptrace, process_vm_readv/writev, pidfd_getfd, kcmp,
//     process_madvise, perf_event_open. Blocking ptrace alone would be moot
//     if process_vm_writev could still write another process's memory.
//   - Kernel attack surface and kernel code: bpf, userfaultfd, io_uring_*
//     (which would also run opens out of this filter's sight), the keyring
//     (add_key, keyctl, request_key), NUMA policy calls, module loading and
//     kexec.
//   - System-wide state: syslog, acct, quotactl(_fd), swapon/off, reboot,
//     settimeofday, clock_settime, adjtimex, clock_adjtime.
//   - Obsolete and hardware-level calls: uselib, modify_ldt, iopl, ioperm,
//     lookup_dcookie, name_to_handle_at, open_by_handle_at.
//
// # Arguments
//
// seccomp sees the six arguments as 64-bit registers. Every argument a rule
// tests is an int, unsigned int or umode_t in the kernel (clone's flags are
// read through lower_32_bits), so the kernel truncates it to its low word and
// the filter compares the low word only: garbage in the high word changes
// neither what the kernel does nor the filter's verdict. Comparing 64 bits
// would open holes (chmod(f, 1<<32|04755) is a setuid chmod).
//
// # Why a generator of its own
//
// The program is small and its layout is simple (each rule a few
// instructions, all jumps short and forward), so the package writes it
// itself instead of using libseccomp (cgo) or a Go library: it needs no
// new dependency, it builds either architecture's filter on any host, and
// the syscall tables are checked against golang.org/x/sys/unix by the tests.
// A syscall whose verdict does not depend on its arguments never makes the
// program read an argument, so the kernel (5.11+) caches its verdict and runs
// no filter at all for it: read, write, mmap, futex ... cost nothing.
//
// Package seccomp imports nothing of pylayer; it never prints and never logs.
package seccomp
