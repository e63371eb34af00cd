package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// Defaults of RunOptions.
const (
	DefaultTimeout   = 30 * time.Second
	DefaultKillGrace = 2 * time.Second
	DefaultMaxOutput = 1 << 20
)

// RunOptions controls Run. The zero value is usable.
type RunOptions struct {
	Timeout   time.Duration // whole run, default DefaultTimeout
	KillGrace time.Duration // SIGTERM to SIGKILL, default DefaultKillGrace
	MaxOutput int64         // bytes kept per stream, default DefaultMaxOutput
	Stdin     io.Reader     // nil, or a terminal, reads /dev/null
	ID        string        // run id ([A-Za-z0-9._-], at most 64), default random
	// User is the host user sessions run as when the caller is root: a user name
	// or "UID:GID"; "" is DefaultSandboxUser. See HostIdentity.
	User string
}

// Result is the outcome of a run that started.
type Result struct {
	ID string
	// ExitCode is the command's exit status. A command ended by signal N gives
	// 128+N and Signal names it (bwrap reports a signal this way, so a command
	// that itself exits with 128+N looks the same, as in a shell).
	ExitCode int
	Signal   string
	// TimedOut: the run hit RunOptions.Timeout and was terminated.
	TimedOut bool
	// Stdout and Stderr hold at most MaxOutput bytes of each stream, followed by
	// a marker line when the stream was cut.
	Stdout, Stderr                   []byte
	StdoutTruncated, StderrTruncated bool
	Duration                         time.Duration
	// Limit names the resource limit that ended the command (its CPU time or
	// file size limit), "" when none did. A process that hits the memory,
	// process or open-file limit gets an error from the kernel instead and
	// usually says so itself.
	Limit string
	// Identity is the host user the session ran as.
	Identity Identity
}

var idRE = lazyre.New(`^[A-Za-z0-9._-]{1,64}$`)

func (o RunOptions) withDefaults() (RunOptions, error) {
	switch {
	case o.Timeout < 0 || o.KillGrace < 0 || o.MaxOutput < 0:
		return o, fmt.Errorf("%w: negative timeout, kill grace or output cap", ErrInvalidSpec)
	case o.ID != "" && !idRE().MatchString(o.ID):
		return o, fmt.Errorf("%w: run id %q: want 1 to 64 of A-Z a-z 0-9 . _ -", ErrInvalidSpec, o.ID)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.KillGrace == 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.ID == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return o, fmt.Errorf("generating a run id: %w", err)
		}
		o.ID = hex.EncodeToString(b[:])
	}
	return o, nil
}
