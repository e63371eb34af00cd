package registrytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// registryBin is where Debian's docker-registry package puts the server.
const registryBin = "/usr/bin/docker-registry"

var installMu sync.Mutex

// ensureInstalled installs Debian's docker-registry when it is missing: apt-get install
// first, apt-get update and a second install only if that fails. Test binaries of other
// packages may do the same at the same time; dpkg's lock (waited for) serializes them.
func ensureInstalled(ctx context.Context) error {
	installMu.Lock()
	defer installMu.Unlock()
	if _, err := os.Stat(registryBin); err == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s is missing and installing it needs root: run `apt-get install -y docker-registry`", registryBin)
	}
	install := []string{"-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "--no-install-recommends", "docker-registry"}
	out, err := aptGet(ctx, install...)
	if err != nil {
		upd, uerr := aptGet(ctx, "-o", "DPkg::Lock::Timeout=300", "update", "-q")
		if uerr != nil {
			return fmt.Errorf("apt-get install docker-registry: %w\n%s\napt-get update: %v\n%s", err, out, uerr, upd)
		}
		if out, err = aptGet(ctx, install...); err != nil {
			return fmt.Errorf("apt-get install docker-registry (after apt-get update): %w\n%s", err, out)
		}
	}
	if _, err := os.Stat(registryBin); err != nil {
		return fmt.Errorf("apt-get installed docker-registry but %s is missing: %w", registryBin, err)
	}
	return nil
}

func aptGet(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return strings.TrimSpace(string(out)), fmt.Errorf("exit status %d", ee.ExitCode())
	}
	return strings.TrimSpace(string(out)), err
}
