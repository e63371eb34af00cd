// Package lock is the lock file: the canonical JSON record of a resolved layer (its target,
// kind, base and every wheel with version, filename, URL, sha256, size and what required it)
// and its key, the sha256 of the canonical bytes without the URLs (Content): index URLs are
// provenance, so the same wheels from any mirror have one key.
//
// A lock is the unit of reproducibility: the same lock builds the same artifact bytes on any
// host, and the same request resolves to the same key on any host on any day. The package
// must never import anything that does I/O beyond reading and writing the lock file itself
// (no index, registry, oci or sandbox packages).
package lock
