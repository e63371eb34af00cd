package fsx

import (
	"os"

	"golang.org/x/sys/unix"
)

func syncfs(d *os.File) error { return unix.Syncfs(int(d.Fd())) }
