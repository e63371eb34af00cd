package registry

import (
	"sync"

	"github.com/pylayer/pylayer/oci"
)

// Every blob this package streams, to or from a repository, is read through
// oci.VerifyReader: it never yields more than the descriptor's size, and fails at the
// end (ErrSizeMismatch or ErrDigestMismatch, both matching ErrDigestMismatch) rather
// than pass off wrong bytes.

// lockedBody is an upload body: net/http may still read it after RoundTrip returns, so
// the verdict is read under a lock.
type lockedBody struct {
	mu sync.Mutex
	v  *oci.VerifyReader
}

func (l *lockedBody) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v.Read(p)
}

func (l *lockedBody) Close() error { return l.v.Close() }

// failed reports the error Read returned, other than io.EOF.
func (l *lockedBody) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v.Err()
}
