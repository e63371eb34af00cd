//go:build linux && !amd64 && !arm64

package seccomp

// unixSysnum is empty where Program has no table.
var unixSysnum = map[string]uintptr{}
