package gunzip

import "errors"

// ErrDeclined: Members met a member it cannot inflate in one call into its buffer; the
// caller reads the stream again, from the start, with its streaming reader.
var ErrDeclined = errors.New("gunzip: a member the fast path declines")

// Members is an io.Reader of a multi-member gzip stream's inflated bytes (NewMembers).
type Members struct {
	src      []byte // members not yet inflated
	buf      []byte // one member's inflated bytes at most
	out      []byte // inflated bytes not yet read
	err      error
	declined bool
}

func (m *Members) Read(p []byte) (int, error) {
	for len(m.out) == 0 {
		if m.err != nil {
			return 0, m.err
		}
		if m.err = m.next(); m.err == ErrDeclined {
			m.declined = true
		}
	}
	n := copy(p, m.out)
	m.out = m.out[n:]
	return n, nil
}

// Declined reports whether a Read returned ErrDeclined: what was read is to be thrown
// away and src read again with the streaming reader.
func (m *Members) Declined() bool { return m.declined }
