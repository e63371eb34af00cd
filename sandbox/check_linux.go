//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"time"
)

// Check runs /usr/bin/true in a sandbox built exactly as Run builds them (all
// namespaces, read-only binds, data files) and reports why it failed, with what
// to do about it: ErrNoNamespaces, ErrBwrapTooOld or ErrBwrapFailed.
func Check(ctx context.Context, bwrap string) error {
	res, err := Run(ctx, bwrap, Spec{Command: []string{"/usr/bin/true"}, Cwd: "/"},
		RunOptions{Timeout: 20 * time.Second, MaxOutput: 64 << 10, ID: "pylayer-check"})
	if err != nil {
		return fmt.Errorf("checking bwrap: %w", err)
	}
	if res.TimedOut {
		return fmt.Errorf("%s: %w: a sandbox running /usr/bin/true did not finish in 20s", bwrap, ErrBwrapFailed)
	}
	if res.ExitCode != 0 {
		return diagnose(bwrap, res.ExitCode, res.Stderr)
	}
	return nil
}
