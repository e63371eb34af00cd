package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/pylayer/pylayer/sandbox"
)

// sandboxFlags are a session's identity and limits (run; ensure and doctor use the defaults).
type sandboxFlags struct {
	user                        string
	processes, openFiles        int
	memory, fileSize, tmp, home string
	cpu                         time.Duration
	rawOutput                   bool
}

func (f *sandboxFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.user, "sandbox-user", os.Getenv("PYLAYER_SANDBOX_USER"),
		"host user (NAME or UID:GID) that root's sessions run as (default $PYLAYER_SANDBOX_USER, else "+sandbox.DefaultSandboxUser+", created on first use)")
	fl.IntVar(&f.processes, "max-processes", sandbox.DefaultProcesses, "processes and threads of the session")
	fl.StringVar(&f.memory, "memory", "2GiB", "address space of each process of the session")
	fl.DurationVar(&f.cpu, "cpu-time", 0, "CPU time of each process of the session, whole seconds (default: only --timeout)")
	fl.IntVar(&f.openFiles, "open-files", sandbox.DefaultOpenFiles, "open files of each process")
	fl.StringVar(&f.fileSize, "file-size", "1GiB", "largest file a session may write")
	fl.StringVar(&f.tmp, "tmp-size", "512MiB", "size of the session's /tmp (and of a tmpfs /workspace)")
	fl.StringVar(&f.home, "home-size", "64MiB", "size of the session's home directory")
	fl.BoolVar(&f.rawOutput, "raw-output", false, "pass the session's control characters to the terminal (by default they are shown escaped)")
}

// limits returns the sandbox limits the flags name.
func (f *sandboxFlags) limits() (sandbox.Limits, error) {
	l := sandbox.Limits{Processes: f.processes, OpenFiles: f.openFiles, CPU: f.cpu}
	for _, s := range []struct {
		flag, v string
		dst     *int64
	}{{"--memory", f.memory, &l.Memory}, {"--file-size", f.fileSize, &l.FileSize},
		{"--tmp-size", f.tmp, &l.Tmp}, {"--home-size", f.home, &l.Home}} {
		n, err := sandbox.ParseSize(s.v)
		if err != nil {
			return l, fmt.Errorf("%s: %w", s.flag, err)
		}
		*s.dst = n
	}
	return l, nil
}

// sessionOutput writes a session's output to w, neutralising control sequences when w is
// a terminal unless raw.
func sessionOutput(w io.Writer, b []byte, raw bool) {
	if f, ok := w.(*os.File); ok && !raw && term.IsTerminal(int(f.Fd())) {
		b = sandbox.TerminalSafe(b)
	}
	w.Write(b)
}
