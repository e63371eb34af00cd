//go:build !unix

package cache

import (
	"context"
	"errors"
	"io/fs"
)

var errBusy = errors.New("lock is busy")

type fileLock struct{}

type lockMode struct{ exclusive, wait, create bool }

func acquire(context.Context, string, lockMode) (*fileLock, error) {
	return nil, errors.New("the host cache needs flock: it runs on Linux and other unix systems only")
}

func (l *fileLock) release()          {}
func (l *fileLock) removeAndRelease() {}

func sameDevice(a, b fs.FileInfo) bool { return true }
