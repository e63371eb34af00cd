package fsx

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TempPrefix begins the name of every temporary file Pending makes, so that a
// directory's readers can pass over work in progress.
const TempPrefix = ".tmp-"

// Pending is a file written aside that appears at its path whole, or not at all.
// Write to it, then Commit (replace path) or CommitNew (never replace); Cleanup,
// deferred right after Create, removes the temporary file unless it was committed.
type Pending struct {
	f    *os.File
	path string
	perm fs.FileMode
	done bool
}

// Create starts a file that Commit will put at path with mode perm. The temporary
// file lies beside path, so the rename stays on one file system.
func Create(ctx context.Context, path string, perm fs.FileMode) (*Pending, error) {
	return CreateIn(ctx, filepath.Dir(path), path, perm)
}

// CreateIn is Create with the temporary file in tmpDir, which must be on the same
// file system as path (a cache's tmp/, a layout's blobs/).
func CreateIn(ctx context.Context, tmpDir, path string, perm fs.FileMode) (*Pending, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(tmpDir, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return &Pending{f: f, path: path, perm: perm}, nil
}

// Write writes to the temporary file.
func (p *Pending) Write(b []byte) (int, error) { return p.f.Write(b) }

// Name is the temporary file's path.
func (p *Pending) Name() string { return p.f.Name() }

// Commit replaces path with what was written: mode, fsync, close, rename, fsync of
// path's directory. Once ctx is done it publishes nothing and returns ctx's error.
func (p *Pending) Commit(ctx context.Context) error { return p.CommitAs(ctx, p.path) }

// CommitAs is Commit to another path than the one Create named, on the same file
// system: for content-addressed files, whose name (their digest) is known only
// once they are written.
func (p *Pending) CommitAs(ctx context.Context, path string) error {
	p.path = path
	if err := p.flush(ctx); err != nil {
		return err
	}
	if err := os.Rename(p.f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	p.done = true
	return SyncDir(ctx, filepath.Dir(path))
}

// CommitNew is Commit that never replaces a file: when path exists already (another
// process created it first) it leaves it alone and returns an error wrapping
// fs.ErrExist. The temporary file is removed either way.
func (p *Pending) CommitNew(ctx context.Context) error {
	if err := p.flush(ctx); err != nil {
		return err
	}
	err := os.Link(p.f.Name(), p.path)
	p.Cleanup()
	if err != nil {
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	return SyncDir(ctx, filepath.Dir(p.path))
}

func (p *Pending) flush(ctx context.Context) error {
	if p.done {
		return fmt.Errorf("writing %s: already committed", p.path)
	}
	if err := ctx.Err(); err != nil {
		p.Cleanup()
		return err
	}
	err := p.f.Chmod(p.perm)
	if err == nil {
		err = p.f.Sync()
	}
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		p.Cleanup()
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	return nil
}

// Cleanup removes the temporary file unless Commit moved it into place. It may be
// called more than once, and after Commit.
func (p *Pending) Cleanup() {
	if p.done {
		return
	}
	p.done = true
	p.f.Close()
	os.Remove(p.f.Name())
}

// WriteFile replaces path with data, atomically and durably (see Pending).
func WriteFile(ctx context.Context, path string, data []byte, perm fs.FileMode) error {
	return WriteFileIn(ctx, filepath.Dir(path), path, data, perm)
}

// WriteFileIn is WriteFile with the temporary file in tmpDir (see CreateIn).
func WriteFileIn(ctx context.Context, tmpDir, path string, data []byte, perm fs.FileMode) error {
	p, err := CreateIn(ctx, tmpDir, path, perm)
	if err != nil {
		return err
	}
	defer p.Cleanup()
	if _, err := p.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return p.Commit(ctx)
}

// CreateFile creates path with data unless it exists, never exposing a partial file
// nor replacing one that another process created first. It reports whether it
// created the file.
func CreateFile(ctx context.Context, path string, data []byte, perm fs.FileMode) (created bool, err error) {
	if _, err := os.Lstat(path); err == nil {
		return false, nil
	}
	p, err := Create(ctx, path, perm)
	if err != nil {
		return false, err
	}
	defer p.Cleanup()
	if _, err := p.Write(data); err != nil {
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	switch err := p.CommitNew(ctx); {
	case errors.Is(err, fs.ErrExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}
