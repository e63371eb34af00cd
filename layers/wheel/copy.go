package wheel

import (
	"io"
	"sync"
)

// copyBufs are the buffers of copyPooled: a tree of a thousand files would otherwise
// allocate (and collect) a 32 KiB buffer per copy, several times per file.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyPooled is io.Copy through a pooled buffer (dst's ReadFrom and src's WriteTo, which
// allocate their own for anything but a file-to-file copy, are not used).
func copyPooled(dst io.Writer, src io.Reader) (int64, error) {
	b := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(b)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *b)
}
