//go:build cgo && libdeflate

package gunzip

/*
#cgo LDFLAGS: -l:libdeflate.a
#include <libdeflate.h>
*/
import "C"

import (
	"io"
	"unsafe"
)

// Available reports whether Whole can ever be ok (built with cgo and the
// libdeflate tag).
const Available = true

// Whole inflates src, a whole gzip stream, into dst's storage when it is large
// enough (else into a new slice), returning the bytes and true; or false, when
// src is not a single plain member (see the package doc), when its trailer states
// more than limit bytes, or when it does not inflate to exactly that size. The
// caller then reads src with its streaming reader.
func Whole(dst, src []byte, limit int64) ([]byte, bool) {
	size, ok := plain(src)
	if !ok || size > limit {
		return nil, false
	}
	if int64(cap(dst)) < size || cap(dst) == 0 {
		dst = make([]byte, max(size, 1))
	}
	dst = dst[:cap(dst)]
	d := C.libdeflate_alloc_decompressor()
	if d == nil {
		return nil, false
	}
	defer C.libdeflate_free_decompressor(d)
	var in, out C.size_t
	// Avail is exactly the stated size: a stream inflating to more is
	// LIBDEFLATE_INSUFFICIENT_SPACE, one inflating to less is caught below (the
	// trailer's ISIZE is checked against the output too).
	res := C.libdeflate_gzip_decompress_ex(d, unsafe.Pointer(&src[0]), C.size_t(len(src)),
		unsafe.Pointer(&dst[0]), C.size_t(size), &in, &out)
	if res != C.LIBDEFLATE_SUCCESS || int(in) != len(src) || int64(out) != size {
		return nil, false
	}
	return dst[:size], true
}

// Deflated inflates src, a raw deflate stream (a zip member's data), into dst in one
// call and reports whether it is exactly dst: the stream ends at src's end, inflates to
// len(dst) bytes, no more and no fewer, and their CRC-32 is crc. On false, dst holds
// nothing of use and the caller reads the member with its streaming reader, whose errors
// are the ones users see.
func Deflated(dst, src []byte, crc uint32) bool {
	if len(src) == 0 || len(dst) == 0 {
		return false
	}
	d := C.libdeflate_alloc_decompressor()
	if d == nil {
		return false
	}
	defer C.libdeflate_free_decompressor(d)
	var in, out C.size_t
	// Avail is exactly len(dst): a stream inflating to more is LIBDEFLATE_INSUFFICIENT_SPACE.
	res := C.libdeflate_deflate_decompress_ex(d, unsafe.Pointer(&src[0]), C.size_t(len(src)),
		unsafe.Pointer(&dst[0]), C.size_t(len(dst)), &in, &out)
	if res != C.LIBDEFLATE_SUCCESS || int(in) != len(src) || int(out) != len(dst) {
		return false
	}
	return uint32(C.libdeflate_crc32(0, unsafe.Pointer(&dst[0]), C.size_t(len(dst)))) == crc
}

// inflateRaw inflates a raw deflate stream with libdeflate into at most limit
// bytes: FuzzWhole's way to learn what libdeflate makes of a stream, to give it
// a valid gzip trailer.
func inflateRaw(src []byte, limit int) ([]byte, bool) {
	if len(src) == 0 {
		return nil, false
	}
	d := C.libdeflate_alloc_decompressor()
	if d == nil {
		return nil, false
	}
	defer C.libdeflate_free_decompressor(d)
	dst := make([]byte, limit+1)
	var in, out C.size_t
	res := C.libdeflate_deflate_decompress_ex(d, unsafe.Pointer(&src[0]), C.size_t(len(src)),
		unsafe.Pointer(&dst[0]), C.size_t(len(dst)), &in, &out)
	if res != C.LIBDEFLATE_SUCCESS || int(in) != len(src) {
		return nil, false
	}
	return dst[:out], true
}

// header is the plain gzip member header Whole accepts: ID1 ID2, CM deflate,
// FLG 0; MTIME, XFL and OS (6 bytes) may be anything.
var header = [4]byte{0x1f, 0x8b, 8, 0}

// plain reports whether b starts with a plain gzip header and is long enough to
// hold a member (header, at least one deflate byte, trailer), and the
// uncompressed size its trailer states (modulo 2^32, as gzip stores it).
func plain(b []byte) (size int64, ok bool) {
	if len(b) < 10+1+8 || [4]byte(b[:4]) != header {
		return 0, false
	}
	t := b[len(b)-4:]
	return int64(uint32(t[0]) | uint32(t[1])<<8 | uint32(t[2])<<16 | uint32(t[3])<<24), true
}

// NewMembers returns a reader of src's inflated bytes that inflates it one member at a
// time, each in one call, into buf's storage, or false when src cannot be read so: its
// first header is not plain, or its trailer (the last member's) states more than
// len(buf) bytes. Like Whole, it is a fast path: a member it cannot inflate in one call
// into buf (a larger one, a header with optional fields, a bad stream) makes Read
// return ErrDeclined, and the caller then reads src from the start with its streaming
// reader, whose errors are the ones users see.
func NewMembers(src, buf []byte) (*Members, bool) {
	size, ok := plain(src)
	if !ok || size > int64(len(buf)) || len(buf) == 0 {
		return nil, false
	}
	return &Members{src: src, buf: buf}, true
}

// next inflates the next member into buf.
func (m *Members) next() error {
	if len(m.src) == 0 {
		return io.EOF
	}
	if len(m.src) < 10+1+8 || [4]byte(m.src[:4]) != header {
		return ErrDeclined
	}
	d := C.libdeflate_alloc_decompressor()
	if d == nil {
		return ErrDeclined
	}
	defer C.libdeflate_free_decompressor(d)
	var in, out C.size_t
	// libdeflate checks the member's CRC-32 and that it inflates to the size its
	// trailer states; one that needs more room than buf is LIBDEFLATE_INSUFFICIENT_SPACE.
	res := C.libdeflate_gzip_decompress_ex(d, unsafe.Pointer(&m.src[0]), C.size_t(len(m.src)),
		unsafe.Pointer(&m.buf[0]), C.size_t(len(m.buf)), &in, &out)
	if res != C.LIBDEFLATE_SUCCESS || in == 0 || int(in) > len(m.src) {
		return ErrDeclined
	}
	m.src, m.out = m.src[in:], m.buf[:out]
	return nil
}
