// Package lock is the lock file: the canonical JSON record of a resolved layer (its target,
// kind, base and every wheel with version, filename, URL, sha256, size and what required it)
// and its key, the sha256 of the canonical bytes without the URLs (Content): index URLs are
// provenance, so the same wheels from any mirror have one key.
//
// One key, one digest: whatever changes a layer's bytes is in its key. The wheels,
// target, kind, base and requirements are; so is CompiledBy, the interpreter that compiled
// the layer's .pyc (set by the builder, layers/build.Builder.Stamp, before the key is
// taken: the same lock built with and without an interpreter, or with two, has two keys).
// Compression is fixed (oci.GzipLevel), so it does not vary. An ext lock names its base by
// the base's ResolutionKey (the key without CompiledBy): what it was resolved against.
//
// CheckStack is the one compatibility check of a stack of layers on an interpreter:
// Python, ABI and platform of each layer against the interpreter's target, and the base of
// every ext layer present; run, ensure and the broker's builder all call it.
//
// A lock is the unit of reproducibility: the same lock builds the same artifact bytes on any
// host, and the same request resolves to the same key on any host on any day. The package
// must never import anything that does I/O beyond reading and writing the lock file itself
// (no index, registry, oci or sandbox packages).
package lock
