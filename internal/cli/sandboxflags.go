package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/pylayer/pylayer/internal/lazyre"
	"github.com/pylayer/pylayer/sandbox"
)

// sandboxFlags are a session's identity and limits (run; ensure and doctor use the defaults).
type sandboxFlags struct {
	user                        string
	processes, openFiles        int
	memory, fileSize, tmp, home string
	cpu                         time.Duration
	rawOutput                   bool
	cacheDir                    string
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
	fl.StringVar(&f.cacheDir, "cache-dir", "", "host directory kept as the session's ~/.cache (XDG_CACHE_HOME, MPLCONFIGDIR) across runs; "+
		"with --session, default one of that session's own under the host cache (never give two sessions one)")
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

// sessionCacheDir is the directory of session id's cache under the host cache root:
// <root>/sessions/<id>/cache, created (0700) when missing. Its parents are the
// caller's, 0755, so that the sandbox user may reach the cache but never replace it;
// sandbox.Run hands the cache itself to that user.
func sessionCacheDir(root, id string) (string, error) {
	if !sessionIDRE().MatchString(id) || id == "." || id == ".." {
		return "", fmt.Errorf("--session %q: want 1 to 64 of A-Z a-z 0-9 . _ - for its cache directory", id)
	}
	parent := filepath.Join(root, "sessions", id)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("creating the cache directory of session %s: %w", id, err)
	}
	dir := filepath.Join(parent, "cache")
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("creating the cache directory of session %s: %w", id, err)
	}
	return dir, nil
}

var sessionIDRE = lazyre.New(`^[A-Za-z0-9._-]{1,64}$`)

// cache returns Spec.Cache for a run: --cache-dir, else the session's own under
// the host cache root, else "" (a cache in the tmpfs home, rebuilt by every run).
func (f *sandboxFlags) cache(root, session string) (string, error) {
	if f.cacheDir != "" {
		dir, err := filepath.Abs(f.cacheDir)
		if err != nil {
			return "", fmt.Errorf("--cache-dir: %w", err)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("--cache-dir %s: not a directory (create it first)", f.cacheDir)
		}
		return dir, nil
	}
	if session == "" {
		return "", nil
	}
	return sessionCacheDir(root, session)
}

// sessionOutput writes a session's output to w, neutralising control sequences when w is
// a terminal unless raw.
func sessionOutput(w io.Writer, b []byte, raw bool) {
	if f, ok := w.(*os.File); ok && !raw && term.IsTerminal(int(f.Fd())) {
		b = sandbox.TerminalSafe(b)
	}
	w.Write(b)
}
