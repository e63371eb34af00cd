//go:build unix

package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// errBusy: a non-blocking lock attempt found the lock taken.
var errBusy = errors.New("lock is busy")

// fileLock is a held flock. flock locks belong to the open file description:
// they exclude other goroutines of this process as well as other processes, and
// the kernel drops them when the holder dies, however it dies.
type fileLock struct{ f *os.File }

// lockMode says how to take a lock.
type lockMode struct {
	exclusive bool // LOCK_EX, else LOCK_SH
	wait      bool // wait (polling, honouring ctx), else fail with errBusy
	create    bool // create the lock file if missing, else fail with fs.ErrNotExist
}

// acquire takes a flock on path. Lock files may be unlinked by their holder
// (GC removes the locks of what it deletes), so after locking it checks that
// the path still names the file it locked, and starts over if not: two
// processes can never believe they hold the same lock on different inodes.
func acquire(ctx context.Context, path string, m lockMode) (*fileLock, error) {
	how := syscall.LOCK_SH
	if m.exclusive {
		how = syscall.LOCK_EX
	}
	flags := os.O_RDONLY // flock needs no write access: holders may be other users
	if m.create {
		flags |= os.O_CREATE
	}
	for {
		f, err := os.OpenFile(path, flags, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening lock %s: %w", path, err)
		}
		if err := flockWait(ctx, f, how, m.wait); err != nil {
			f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return &fileLock{f: f}, nil
		}
		f.Close()
		if err2 != nil && !errors.Is(err2, fs.ErrNotExist) {
			return nil, fmt.Errorf("checking lock %s: %w", path, err2)
		}
		if !m.create && errors.Is(err2, fs.ErrNotExist) {
			return nil, fmt.Errorf("opening lock %s: %w", path, fs.ErrNotExist)
		}
	}
}

func flockWait(ctx context.Context, f *os.File, how int, wait bool) error {
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		if !wait {
			return errBusy
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(delay):
		}
	}
}

// release drops the lock. It is safe to call more than once.
func (l *fileLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// removeAndRelease unlinks the lock file while still holding it, then drops
// the lock; waiters on the old inode notice and retry on a fresh file.
func (l *fileLock) removeAndRelease() {
	if l != nil && l.f != nil {
		os.Remove(l.f.Name())
		l.release()
	}
}

// sameDevice reports whether two files live on the same filesystem, so that
// rename between them is atomic.
func sameDevice(a, b fs.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev
}
