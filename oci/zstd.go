//go:build !lean

package oci

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// ZstdReader decompresses a zstd stream (a tar+zstd layer blob) with the limits every
// reader of layers shares: a window of at most MaxZstdWindow, and the decoding in the
// reading goroutine (a pull unpacks several blobs at once already). Close it when done;
// closing it does not close r.
//
// The front end (-tags lean) does not link it (zstd_lean.go): klauspost/compress/zstd's
// package init (snapref's CRC-32C table) ran before main on every start, and the front
// end never unpacks a blob: what the cache lacks goes to the full binary.
func ZstdReader(r io.Reader) (io.ReadCloser, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(MaxZstdWindow),
		zstd.WithDecoderMaxMemory(MaxZstdWindow))
	if err != nil {
		return nil, fmt.Errorf("starting a zstd decoder: %w", err)
	}
	return zstdCloser{zr}, nil
}

type zstdCloser struct{ *zstd.Decoder }

func (z zstdCloser) Close() error { z.Decoder.Close(); return nil }
