//go:build !(cgo && libdeflate)

package gunzip

// Available reports whether Whole can ever be ok (built with cgo and the
// libdeflate tag).
const Available = false

// Whole is never ok without cgo and the libdeflate tag: the caller reads src with its streaming reader.
func Whole(dst, src []byte, limit int64) ([]byte, bool) { return nil, false }

// Deflated is never true without cgo and the libdeflate tag: the caller reads the member with its streaming reader.
func Deflated(dst, src []byte, crc uint32) bool { return false }

func inflateRaw(src []byte, limit int) ([]byte, bool) { return nil, false }

// NewMembers is never ok without cgo and the libdeflate tag: the caller reads src with its streaming reader.
func NewMembers(src, buf []byte) (*Members, bool) { return nil, false }

func (m *Members) next() error { return ErrDeclined }
