//go:build linux

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rlimit is one resource limit as prlimit(2) takes it.
type rlimit struct {
	name     string
	resource int
	soft     uint64
	hard     uint64
}

// rlimits are l (with defaults) as the session's rlimits: core dumps off, and a CPU
// limit, when set, as SIGXCPU at l.CPU (which Result reports) and SIGKILL a second later.
func (l Limits) rlimits() []rlimit {
	both := func(name string, res int, v int64) rlimit { return rlimit{name, res, uint64(v), uint64(v)} }
	rs := []rlimit{
		both("RLIMIT_NPROC", unix.RLIMIT_NPROC, int64(l.Processes)), both("RLIMIT_AS", unix.RLIMIT_AS, l.Memory),
		both("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, int64(l.OpenFiles)), both("RLIMIT_FSIZE", unix.RLIMIT_FSIZE, l.FileSize),
		both("RLIMIT_CORE", unix.RLIMIT_CORE, 0),
	}
	if l.CPU > 0 {
		secs := uint64(l.CPU / time.Second)
		rs = append(rs, rlimit{"RLIMIT_CPU", unix.RLIMIT_CPU, secs, secs + 1})
	}
	return rs
}

// setLimits sets the rlimits of lim on process pid, bwrap's child waiting on its
// --block-fd, which runs as ident. prlimit(2) on another process needs either
// CAP_SYS_RESOURCE, which root lacks on this host, or the caller's real uid and gid
// to be the target's; so when ident is not who pylayer runs as, the calls are made
// from a thread locked for them whose real and effective ids are ident's for the
// calls (raw setresgid and setresuid, which change the calling thread only, unlike
// syscall.Setresuid). The saved uid stays 0, so the thread takes its own ids back
// after; if it cannot, it is never unlocked, and the runtime ends it with this
// goroutine (or, were it the main thread, parks it for good: it never runs Go code
// again).
func setLimits(pid int, ident Identity, lim Limits) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ruid, rgid := os.Getuid(), os.Getgid()
		switchIDs := ident.UID != ruid || ident.GID != rgid
		if switchIDs {
			if err := setThreadIDs(ident.UID, ident.GID, ruid, rgid); err != nil {
				errc <- err
				return // the thread stays locked: it ends with this goroutine
			}
		}
		var err error
		for _, r := range lim.rlimits() {
			l := unix.Rlimit{Cur: r.soft, Max: r.hard}
			if err = unix.Prlimit(pid, r.resource, &l, nil); err != nil {
				err = fmt.Errorf("%s of process %d: %w", r.name, pid, err)
				break
			}
		}
		if switchIDs {
			if rerr := setThreadIDs(ruid, rgid, ident.UID, ident.GID); rerr != nil {
				errc <- errors.Join(err, rerr)
				return
			}
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// setThreadIDs sets the real and effective uid and gid of the calling thread alone from
// (fromUID, fromGID) to (uid, gid), leaving the saved ids: the gid first while the thread
// may still change it, to a nonzero uid; the uid first, to get the capability back, on the
// way back to 0.
func setThreadIDs(uid, gid, fromUID, fromGID int) error {
	setgid := func() error {
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(gid), uintptr(gid), ^uintptr(0)); e != 0 {
			return fmt.Errorf("setresgid %d (from %d): %w", gid, fromGID, e)
		}
		return nil
	}
	setuid := func() error {
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), ^uintptr(0)); e != 0 {
			return fmt.Errorf("setresuid %d (from %d): %w", uid, fromUID, e)
		}
		return nil
	}
	if uid == 0 {
		if err := setuid(); err != nil {
			return err
		}
		return setgid()
	}
	if err := setgid(); err != nil {
		return err
	}
	return setuid()
}

// limit sets the session's limits once bwrap has started: it reads the pid of bwrap's
// child from --info-fd, sets the limits on it (setLimits) and releases it through
// --block-fd. A bwrap that ended before it made its child, or whose child died while
// being set up, is not an error here: bwrap's exit status and stderr say why. On any
// other failure the caller kills bwrap's process group before the block pipe closes.
func (f *files) limit(ctx context.Context, ident Identity, lim Limits) error {
	stop := context.AfterFunc(ctx, func() { f.info.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(io.LimitReader(f.info, 64<<10)).Decode(&info); err != nil {
		if errors.Is(err, io.EOF) {
			return errBwrapEnded
		}
		return fmt.Errorf("reading bwrap's --info-fd: %w", err)
	}
	if info.ChildPID <= 1 {
		return fmt.Errorf("bwrap's --info-fd named child pid %d", info.ChildPID)
	}
	if err := setLimits(info.ChildPID, ident, lim); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return errNoChild
		}
		return err
	}
	if _, err := f.block.Write([]byte{1}); err != nil {
		if errors.Is(err, syscall.EPIPE) {
			return errNoChild
		}
		return fmt.Errorf("releasing bwrap's child: %w", err)
	}
	return nil
}

var (
	// errNoChild: bwrap's child died while being set up, before its limits were set:
	// nothing runs, and bwrap's own status says why.
	errNoChild = errors.New("bwrap's child is gone")
	// errBwrapEnded: bwrap closed --info-fd without naming a child: it is ending, and its
	// status says why. Its process group is killed all the same, in case a child it made
	// would otherwise be released, unlimited, when the block pipe closes.
	errBwrapEnded = errors.New("bwrap ended before it started the sandbox")
)
