package sandbox

import (
	"runtime"

	"github.com/pylayer/pylayer/sandbox/seccomp"
)

// seccompProgram returns the compiled seccomp filter bwrap loads before it runs
// the command (--seccomp): see package sandbox/seccomp.
var seccompProgram = func() ([]byte, error) { return seccomp.Program(runtime.GOARCH) }
