package fsx

import (
	"context"
	"io"
)

// Reader returns a reader that reads from r until ctx is done, then fails with
// ctx's error: a long copy stops at the next Read after a cancel.
func Reader(ctx context.Context, r io.Reader) io.Reader { return &ctxReader{ctx: ctx, r: r} }

// ReadCloser is Reader for an io.ReadCloser; Close closes rc.
func ReadCloser(ctx context.Context, rc io.ReadCloser) io.ReadCloser {
	return &ctxReadCloser{ctxReader{ctx: ctx, r: rc}, rc}
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

type ctxReadCloser struct {
	ctxReader
	c io.Closer
}

func (c *ctxReadCloser) Close() error { return c.c.Close() }
