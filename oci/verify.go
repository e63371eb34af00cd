package oci

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// VerifyReader checks content against its descriptor while it streams: it passes
// through at most want.Size bytes of its source while hashing them and, instead of
// io.EOF, returns an error wrapping ErrSizeMismatch when the content is longer or
// shorter than want.Size, or ErrDigestMismatch when it hashes to another digest.
// io.EOF therefore means the content verified. Errors are sticky. It is the one
// verifier of streamed blobs: the layout, the registry client and the host cache
// all read through it.
type VerifyReader struct {
	r    io.Reader
	want v1.Descriptor
	h    hash.Hash
	n    int64
	err  error
}

var _ io.ReadCloser = (*VerifyReader)(nil)

// NewVerifyReader verifies what it reads from r against want (a sha256 digest; see
// VerifyReader). Close closes r if r is an io.Closer.
func NewVerifyReader(r io.Reader, want v1.Descriptor) *VerifyReader {
	return &VerifyReader{r: r, want: want, h: sha256.New()}
}

func (v *VerifyReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	// Ask for one byte past the end so that an overlong stream is noticed.
	if room := v.want.Size - v.n + 1; int64(len(p)) > room {
		p = p[:max(room, 0)]
	}
	n, err := v.r.Read(p)
	if v.n+int64(n) > v.want.Size {
		n = int(v.want.Size - v.n)
		v.h.Write(p[:n])
		v.n += int64(n)
		v.err = fmt.Errorf("%s: %w: more than the %d bytes its descriptor states", v.want.Digest, ErrSizeMismatch, v.want.Size)
		return n, v.err
	}
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case err == io.EOF:
		v.err = v.verdict()
		if v.err == nil {
			v.err = io.EOF
		}
	case errors.Is(err, ErrDigestMismatch):
		v.err = err // a verifying source said it already (a registry's reader inside the cache's)
	case err != nil:
		v.err = fmt.Errorf("reading %s after %d of %d bytes: %w", v.want.Digest, v.n, v.want.Size, err)
	}
	return n, v.err
}

func (v *VerifyReader) verdict() error {
	if v.n != v.want.Size {
		return fmt.Errorf("%s: %w: %d bytes, its descriptor states %d", v.want.Digest, ErrSizeMismatch, v.n, v.want.Size)
	}
	if got := sumDigest(v.h); got != v.want.Digest {
		return fmt.Errorf("%s: %w: the content hashes to %s", v.want.Digest, ErrDigestMismatch, got)
	}
	return nil
}

// Err is the reader's verdict so far: nil once the whole content was read and
// verified (Read returned io.EOF), the sticky error otherwise, or nil while the
// stream has neither ended nor failed.
func (v *VerifyReader) Err() error {
	if v.err == io.EOF {
		return nil
	}
	return v.err
}

// Verified reports whether the whole content was read and matched want.
func (v *VerifyReader) Verified() bool { return v.err == io.EOF }

// Close closes the source when it is an io.Closer.
func (v *VerifyReader) Close() error {
	if c, ok := v.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// CheckBytes verifies content held in memory against want, with the errors of
// VerifyReader.
func CheckBytes(b []byte, want v1.Descriptor) error {
	if int64(len(b)) != want.Size {
		return fmt.Errorf("%s: %w: %d bytes, its descriptor states %d", want.Digest, ErrSizeMismatch, len(b), want.Size)
	}
	if got := digest.FromBytes(b); got != want.Digest {
		return fmt.Errorf("%s: %w: the content hashes to %s", want.Digest, ErrDigestMismatch, got)
	}
	return nil
}
