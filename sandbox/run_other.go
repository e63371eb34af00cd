//go:build !linux

package sandbox

import (
	"context"
	"errors"
)

var errNotLinux = errors.New("bubblewrap sandboxes need Linux")

// Run needs Linux.
func Run(ctx context.Context, bwrap string, s Spec, o RunOptions) (*Result, error) {
	return nil, errNotLinux
}

// Check needs Linux.
func Check(ctx context.Context, bwrap string) error { return errNotLinux }
