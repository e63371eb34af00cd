//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
)

// checkCache checks Spec.Cache as Run binds it: an existing directory, reached and
// handed to the session's host user under the workspace's rules (checkWorkspace:
// no symlink in the path, owned by the caller or that user, no directory above it
// that user may write), so that a session can neither redirect the bind nor find
// its cache unwritable.
func checkCache(s Spec, ident Identity) error {
	if s.Cache == "" {
		return nil
	}
	fi, err := os.Stat(s.Cache)
	switch {
	case err != nil:
		return fmt.Errorf("%w: cache: %w", ErrInvalidSpec, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: cache %s: not a directory", ErrInvalidSpec, s.Cache)
	}
	if ident.UID != os.Geteuid() {
		if err := checkReachable("cache", filepath.Dir(s.Cache), ident); err != nil {
			return err
		}
	}
	if err := checkWorkspace(s.Cache, ident); err != nil {
		return fmt.Errorf("the session's cache directory, checked as a workspace: %w", err)
	}
	return nil
}
