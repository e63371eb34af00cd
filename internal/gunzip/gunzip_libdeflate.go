//go:build cgo && libdeflate

package gunzip

/*
#cgo LDFLAGS: -l:libdeflate.a
#include <libdeflate.h>
*/
import "C"

import "unsafe"

// Available reports whether Whole can ever be ok (built with cgo and the
// libdeflate tag).
const Available = true

// Whole inflates src, a whole gzip stream, into dst's storage when it is large
// enough (else into a new slice), returning the bytes and true; or false, when
// src is not a single plain member (see the package doc), when its trailer states
// more than limit bytes, or when it does not inflate to exactly that size. The
// caller then reads src with its streaming reader.
func Whole(dst, src []byte, limit int64) ([]byte, bool) {
	size, ok := Plain(src)
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
