package executor

import (
	"context"
	"errors"

	"github.com/pylayer/pylayer/sandbox"
)

// kernelStarter is a placeholder until sandbox/kernel's Start lands: sessions cannot
// run code yet, everything else of the Manager works.
func kernelStarter(bwrap, user string, maxOutput int64) func(context.Context, sandbox.Spec) (kernelProc, error) {
	return func(context.Context, sandbox.Spec) (kernelProc, error) {
		return nil, errors.New("this build of pylayer has no session kernel yet")
	}
}
