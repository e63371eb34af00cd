//go:build lean

package oci

import (
	"errors"
	"io"
)

// ZstdReader is the full binary's (zstd.go): the front end links no zstd decoder, and
// never needs one, since it unpacks nothing (a layer the cache lacks is pulled by the
// full binary, which Main hands the command line to).
func ZstdReader(io.Reader) (io.ReadCloser, error) {
	return nil, errors.New("zstd-compressed blobs are unpacked by the full pylayer binary (pylayer-full), not by the front end")
}
