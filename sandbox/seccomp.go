package sandbox

import (
	"runtime"
	"sync"

	"github.com/pylayer/pylayer/sandbox/seccomp"
)

// seccompProgram returns the compiled seccomp filter bwrap loads before it runs
// the command (--seccomp): see package sandbox/seccomp. It is assembled once per
// process, not per session; callers only read the bytes.
var seccompProgram = sync.OnceValues(func() ([]byte, error) { return seccomp.Program(runtime.GOARCH) })
