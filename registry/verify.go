package registry

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// verifyReader passes through at most want.Size bytes of r while hashing them. Instead of
// io.EOF it returns an error wrapping ErrDigestMismatch when the content is longer or
// shorter than want.Size or hashes to another digest. Errors are sticky.
type verifyReader struct {
	r    io.ReadCloser
	want v1.Descriptor
	what string // "blob", "manifest" or "local blob", for messages
	h    hash.Hash
	n    int64
	err  error
}

func newVerifyReader(r io.ReadCloser, want v1.Descriptor, what string) *verifyReader {
	return &verifyReader{r: r, want: want, what: what, h: sha256.New()}
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	// Ask for one byte past the end so an overlong body is noticed.
	if room := v.want.Size - v.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := v.r.Read(p)
	if v.n+int64(n) > v.want.Size {
		n = int(v.want.Size - v.n)
		v.h.Write(p[:n])
		v.n += int64(n)
		v.err = fmt.Errorf("%s %s: %w: more than the %d bytes its descriptor states", v.what, v.want.Digest, ErrDigestMismatch, v.want.Size)
		return n, v.err
	}
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case err == io.EOF:
		v.err = v.check()
		if v.err == nil {
			v.err = io.EOF
		}
	case err != nil:
		v.err = fmt.Errorf("reading %s %s after %d of %d bytes: %w", v.what, v.want.Digest, v.n, v.want.Size, err)
	}
	return n, v.err
}

func (v *verifyReader) check() error {
	if v.n != v.want.Size {
		return fmt.Errorf("%s %s: %w: %d bytes, its descriptor states %d", v.what, v.want.Digest, ErrDigestMismatch, v.n, v.want.Size)
	}
	if got := digest.NewDigest(digest.SHA256, v.h); got != v.want.Digest {
		return fmt.Errorf("%s %s: %w: the content hashes to %s", v.what, v.want.Digest, ErrDigestMismatch, got)
	}
	return nil
}

func (v *verifyReader) Close() error { return v.r.Close() }

// lockedBody is an upload body: net/http may still read it after RoundTrip returns, so
// the verdict is read under a lock.
type lockedBody struct {
	mu sync.Mutex
	v  *verifyReader
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
	if l.v.err == io.EOF {
		return nil
	}
	return l.v.err
}
