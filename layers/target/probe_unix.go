//go:build unix

package target

import (
	"os/exec"
	"syscall"
)

// setProcessGroup runs cmd in its own process group and kills the whole group
// on cancellation, so a helper the interpreter started cannot outlive it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
