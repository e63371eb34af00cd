//go:build !unix

package target

import "os/exec"

func setProcessGroup(*exec.Cmd) {}
