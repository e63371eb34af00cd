package sandbox

import (
	"fmt"
	"time"
)

// Default limits of a session (Limits' zero fields).
const (
	DefaultProcesses = 512
	DefaultMemory    = 2 << 30
	DefaultOpenFiles = 1024
	DefaultFileSize  = 1 << 30
	DefaultTmp       = 512 << 20
	DefaultHome      = 64 << 20
	DefaultShm       = 64 << 20
)

// Limits are a session's resource limits. A zero field takes its default; a
// negative one is refused. Core dumps are always off.
//
// This host's kernel does not delegate a cgroup v2 subtree to pylayer, so the
// limits are rlimits, which the session's first program (Prlimit) sets on itself
// before it runs the command (prlimit(2) on the sandbox's process from outside is
// refused: root here lacks CAP_SYS_RESOURCE, and bwrap runs as another user), and
// tmpfs sizes, which bwrap sets (--size):
//
//   - Processes is RLIMIT_NPROC. The kernel counts it per user namespace, so it
//     caps the processes and threads of this session alone, not the host user's.
//   - Memory is RLIMIT_AS, per process: an allocation past it fails
//     (MemoryError in Python), never the host.
//   - CPU is RLIMIT_CPU, per process: past it the process gets SIGXCPU and Run's
//     Result says so. The run's wall-clock Timeout still applies.
//   - OpenFiles is RLIMIT_NOFILE; FileSize is RLIMIT_FSIZE (SIGXFSZ, or EFBIG).
//   - Tmp sizes /tmp (and a tmpfs /workspace), Home /home, Shm /dev/shm: a full
//     tmpfs gives ENOSPC inside the session and takes nothing from the host past
//     its size.
type Limits struct {
	Processes int
	Memory    int64
	CPU       time.Duration
	OpenFiles int
	FileSize  int64
	Tmp       int64
	Home      int64
	Shm       int64
}

func (l Limits) withDefaults() (Limits, error) {
	if l.Processes < 0 || l.Memory < 0 || l.CPU < 0 || l.OpenFiles < 0 || l.FileSize < 0 ||
		l.Tmp < 0 || l.Home < 0 || l.Shm < 0 {
		return l, fmt.Errorf("%w: negative resource limit %+v", ErrInvalidSpec, l)
	}
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if l.Processes == 0 {
		l.Processes = DefaultProcesses
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	def(&l.Memory, DefaultMemory)
	def(&l.FileSize, DefaultFileSize)
	def(&l.Tmp, DefaultTmp)
	def(&l.Home, DefaultHome)
	def(&l.Shm, DefaultShm)
	if l.CPU > 0 && l.CPU < time.Second {
		return l, fmt.Errorf("%w: a CPU time limit under 1s (%s) cannot be set: rlimits count whole seconds", ErrInvalidSpec, l.CPU)
	}
	if l.Memory < 64<<20 {
		return l, fmt.Errorf("%w: a memory limit of %d bytes is too small to start Python (want at least 64 MiB)", ErrInvalidSpec, l.Memory)
	}
	if l.Processes < 8 || l.OpenFiles < 32 {
		return l, fmt.Errorf("%w: at least 8 processes and 32 open files are needed to start a session", ErrInvalidSpec)
	}
	return l, nil
}
