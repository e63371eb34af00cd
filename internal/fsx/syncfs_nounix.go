//go:build !unix

package fsx

import "os"

// Without sync(2), fsync of the directory is the best there is.
func syncfs(d *os.File) error { return d.Sync() }
