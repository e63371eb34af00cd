// Package wheel reads Python wheel files and installs one wheel into a self-contained,
// reproducible per-wheel tree, following the binary distribution format specification
// (https://packaging.python.org/en/latest/specifications/binary-distribution-format/)
// and matching what pip 23.2 installs, byte for byte, for everything that pip and
// pylayer both write.
//
// Wheels come from the internet and the installed trees are mounted into sandboxes, so
// everything here is defensive: file names are validated, RECORD is verified strictly
// before anything is written, unsafe paths, links, special modes and oversized members are
// refused, and an install is built in a temporary sibling directory that is renamed into
// place only when complete.
//
// The tree that Install writes is:
//
//	site-packages/...          purelib and platlib content, the .dist-info directory
//	bin/...                    .data/scripts and console/gui entry point scripts
//	include/<name>/...         .data/headers
//	data/...                   .data/data
//
// This package is a leaf of the layers tree: it must never import the registry, oci,
// sandbox, broker or cmd packages, nor any other pylayer package except for tests
// (test/fixture in _test.go files).
package wheel
