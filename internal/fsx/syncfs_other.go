//go:build unix && !linux

package fsx

import (
	"os"

	"golang.org/x/sys/unix"
)

func syncfs(*os.File) error { unix.Sync(); return nil }
