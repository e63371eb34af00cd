package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Sentinel errors of FindBwrap and Check.
var (
	// ErrBwrapNotFound: no bwrap executable on this host.
	ErrBwrapNotFound = errors.New("bubblewrap (bwrap) not found: install it with `apt-get install bubblewrap`")
	// ErrNoNamespaces: bwrap runs but the kernel or a container policy refuses it
	// the user namespace it needs.
	ErrNoNamespaces = errors.New("bwrap cannot create user namespaces: " +
		"enable them (Debian: sysctl -w kernel.unprivileged_userns_clone=1; " +
		"Ubuntu 23.10+: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap; " +
		"everywhere: user.max_user_namespaces > 0), allow them in the container's seccomp profile, or run as root")
	// ErrBwrapTooOld: bwrap lacks an option pylayer uses (--perms, --ro-bind-data ...).
	ErrBwrapTooOld = errors.New("bwrap is too old: bubblewrap 0.5 or later is needed")
	// ErrBwrapFailed: the probe sandbox failed for another reason (see the message).
	ErrBwrapFailed = errors.New("bwrap cannot run a sandbox")
)

// bwrapCandidates are where distributions install bwrap, looked at first.
var bwrapCandidates = []string{"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"}

// FindBwrap returns the absolute path of bwrap: the first executable of
// /usr/bin/bwrap, /usr/local/bin/bwrap and /bin/bwrap, else bwrap looked up
// on the caller's PATH (once, here; Run never consults PATH).
func FindBwrap() (string, error) {
	for _, p := range bwrapCandidates {
		if executable(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath("bwrap")
	if err != nil {
		return "", ErrBwrapNotFound
	}
	abs, err := filepath.Abs(p)
	if err != nil || !executable(abs) {
		return "", ErrBwrapNotFound
	}
	return abs, nil
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && fi.Mode()&fs.ModeType == 0
}

// diagnose turns the output of a failed probe into an actionable error.
func diagnose(bwrap string, exitCode int, stderr []byte) error {
	msg := string(stderr)
	switch {
	case containsAny(msg, "No permission to create new namespace", "Creating new namespace failed",
		"setting up uid map", "setting up gid map", "user namespace"):
		return fmt.Errorf("%s: %w\n%s", bwrap, ErrNoNamespaces, msg)
	case containsAny(msg, "Unknown option", "unrecognized option"):
		return fmt.Errorf("%s: %w\n%s", bwrap, ErrBwrapTooOld, msg)
	}
	return fmt.Errorf("%s: %w: probe exited with status %d\n%s", bwrap, ErrBwrapFailed, exitCode, msg)
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
