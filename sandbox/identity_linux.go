//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultSandboxUser is the host user that sessions started by root run as; Run
// creates it (a system user and group, no home, no shell) the first time it is
// needed.
const DefaultSandboxUser = "pylayer-sandbox"

// ErrNoSandboxUser: pylayer runs as root and no unprivileged host user could be
// found or made for its sessions. A session never runs as host root.
var ErrNoSandboxUser = errors.New("no unprivileged host user for sessions")

var (
	identMu    sync.Mutex
	identCache = map[string]Identity{}
)

// validUserName reports whether name matches ^[a-z_][a-z0-9_-]{0,31}$, the portable
// user names useradd(8) accepts, without a regexp: compiling one cost every session's
// start ~60 µs.
func validUserName(name string) bool {
	if len(name) == 0 || len(name) > 32 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case (c >= '0' && c <= '9' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// HostIdentity returns the host identity of a session started by this process.
// A caller that is not root runs sessions as itself (bwrap maps the sandbox's
// uid to it). Root runs them as the user named by name — a user name, or a
// numeric "UID:GID" — and DefaultSandboxUser when name is "": a missing default
// user is created with useradd(8) as a system user without a home or a shell.
// An identity whose uid or gid is 0 is refused: ErrNoSandboxUser.
func HostIdentity(ctx context.Context, name string) (Identity, error) {
	if os.Geteuid() != 0 {
		if name != "" {
			return Identity{}, fmt.Errorf("%w: a sandbox user (%q) can only be chosen by root; an unprivileged caller's sessions run as itself", ErrInvalidSpec, name)
		}
		return Identity{UID: os.Geteuid(), GID: os.Getegid()}, nil
	}
	if name == "" {
		name = DefaultSandboxUser
	}
	identMu.Lock()
	defer identMu.Unlock()
	if id, ok := identCache[name]; ok {
		return id, nil
	}
	id, err := resolveIdentity(ctx, name)
	if err != nil {
		return Identity{}, err
	}
	identCache[name] = id
	return id, nil
}

func resolveIdentity(ctx context.Context, name string) (Identity, error) {
	var id Identity
	if u, g, ok := strings.Cut(name, ":"); ok {
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			return id, fmt.Errorf("%w: sandbox user %q: want a user name or UID:GID", ErrInvalidSpec, name)
		}
		id = Identity{UID: uid, GID: gid}
	} else {
		if !validUserName(name) {
			return id, fmt.Errorf("%w: sandbox user %q: not a valid user name", ErrInvalidSpec, name)
		}
		u, err := user.Lookup(name)
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) && name == DefaultSandboxUser {
			if err := createUser(ctx, name); err != nil {
				return id, err
			}
			u, err = user.Lookup(name)
		}
		if err != nil {
			return id, fmt.Errorf("%w: looking up sandbox user %q: %w (create it, e.g. `useradd --system --user-group --no-create-home --shell /usr/sbin/nologin %s`, or name another with --sandbox-user)",
				ErrNoSandboxUser, name, err, name)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		id = Identity{UID: uid, GID: gid, Name: name}
	}
	if id.UID == 0 || id.GID == 0 {
		return Identity{}, fmt.Errorf("%w: %s is root (uid or gid 0): sessions never run as host root; name an unprivileged user with --sandbox-user", ErrNoSandboxUser, id)
	}
	return id, nil
}

// createUser makes the default sandbox user, under a lock so that two pylayer
// processes starting their first session at once do not both try.
func createUser(ctx context.Context, name string) error {
	lock, err := os.OpenFile("/run/lock/pylayer-sandbox-user.lock", os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		lock, err = os.OpenFile(os.TempDir()+"/pylayer-sandbox-user.lock", os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	}
	if err == nil {
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err == nil {
			defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		}
	}
	if _, err := user.Lookup(name); err == nil {
		return nil // made by another process meanwhile
	}
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		for _, p := range []string{"/usr/sbin/useradd", "/sbin/useradd"} {
			if _, serr := os.Stat(p); serr == nil {
				useradd, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%w: user %s does not exist and useradd is missing: create an unprivileged user for sessions and name it with --sandbox-user", ErrNoSandboxUser, name)
	}
	cmd := exec.CommandContext(ctx, useradd, "--system", "--user-group", "--no-create-home",
		"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--comment", "pylayer sandbox sessions", name)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if _, lerr := user.Lookup(name); lerr == nil {
			return nil
		}
		return fmt.Errorf("%w: creating user %s: %v: %s (create it yourself, or name another with --sandbox-user)",
			ErrNoSandboxUser, name, err, strings.TrimSpace(out.String()))
	}
	return nil
}
