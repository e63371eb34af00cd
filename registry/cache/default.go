package cache

import (
	"fmt"
	"os"
	"path/filepath"
)

// SystemDir is the host cache of a pylayer run by root: a system-wide directory
// (mode 0755) that the unprivileged user sessions run as can enter, since bwrap
// binds the layers as that user. The layers in it are signed public artifacts,
// read-only.
const SystemDir = "/var/cache/pylayer"

// DefaultDir is where the host cache lives unless configured: SystemDir for
// root, else <the user's cache dir>/pylayer.
func DefaultDir() (string, error) {
	if os.Geteuid() == 0 {
		return SystemDir, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: set --cache or PYLAYER_CACHE (%v)", err)
	}
	return filepath.Join(d, "pylayer"), nil
}
