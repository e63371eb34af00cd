package registry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// resumeBody is the body of a blob GET that, when the connection breaks mid-stream,
// continues where it stopped with a Range request (or, if the registry ignores Range,
// a full GET whose first bytes it skips), up to Options.Retries attempts in all. The
// verifyReader on top still checks the whole content against the digest.
type resumeBody struct {
	ctx     context.Context
	r       *remoteRepo
	d       v1.Descriptor
	rc      io.ReadCloser
	off     int64
	attempt int
}

func (b *resumeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.off += int64(n)
	if err == nil || err == io.EOF || !transientNetError(err) || b.ctx.Err() != nil {
		return n, err
	}
	if b.off >= b.d.Size {
		return n, io.EOF // all bytes are here; the verifyReader above judges them
	}
	for b.attempt++; b.attempt < b.r.opts.Retries; b.attempt++ {
		b.r.note.emit(Event{Kind: Retrying, Digest: b.d.Digest, Size: b.d.Size, Attempt: b.attempt, Err: err})
		if berr := backoff(b.ctx, b.r.opts.RetryDelay, b.attempt); berr != nil {
			return n, berr
		}
		rerr := b.reopen()
		if rerr == nil {
			return n, nil
		}
		if !transientNetError(rerr) {
			return n, fmt.Errorf("%w; resuming the download failed: %v", err, rerr)
		}
	}
	return n, fmt.Errorf("%w (after %d attempts)", err, b.attempt)
}

func (b *resumeBody) reopen() error {
	b.rc.Close()
	b.rc = io.NopCloser(strings.NewReader("")) // until a new body is open
	// A closed range: some registries do not understand "bytes=N-".
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", b.off, b.d.Size-1)}}
	resp, err := b.r.do(b.ctx, b.r.pull, http.MethodGet, "blobs/"+string(b.d.Digest), hdr, nil, 0)
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-", b.off)) {
			resp.Body.Close()
			return fmt.Errorf("the registry answered the range from %d with %q", b.off, resp.Header.Get("Content-Range"))
		}
	case http.StatusOK:
		if _, err := io.CopyN(io.Discard, resp.Body, b.off); err != nil {
			resp.Body.Close()
			return err
		}
	default:
		return b.r.statusError(resp, "pull", "blob "+string(b.d.Digest))
	}
	b.rc = resp.Body
	return nil
}

func (b *resumeBody) Close() error { return b.rc.Close() }
