//go:build unix

package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// withIndexLock runs fn holding an exclusive flock on the layout's lock file.
// flock locks belong to the open file description, so the lock excludes other
// goroutines of this process as well as other processes, and the kernel drops
// it if the holder dies. Waiting for the lock honours ctx.
func (l *Layout) withIndexLock(ctx context.Context, fn func() error) error {
	f, err := os.OpenFile(filepath.Join(l.Dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("opening lock file: %w", err)
	}
	defer f.Close() // releases the lock
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(wait):
		}
	}
	return fn()
}
