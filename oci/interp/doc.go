// Package interp builds the interpreter artifact: a relocatable CPython
// prefix (python-build-standalone install_only in production, or any prefix
// laid out as bin/python3 and lib/python3.X) packed into one reproducible layer
// blob, published and signed like a package layer, and mounted read-only at
// MountPath in every sandbox.
//
// Its config blob (oci.MediaTypePythonConfig) is the canonical JSON of Config:
// version, ABI, platform tags, supported wheel tags and marker environment,
// probed by running the interpreter once at build time (layers/target.Probe),
// the fixed in-sandbox mount path, and the digest of the tree itself
// (oci.TreeDigest, the layer blob's diff ID). Its key is the sha256 of those
// bytes: an interpreter is named by its bytes, so two prefixes of one version
// have two keys and two tags. Probing runs the interpreter in place with -I -S
// -B and never writes into the prefix; nor does building layers with it
// (layers/wheel compiles .pyc into the layer's own tree).
//
// The tree packed carries its standard library compiled (Compile): a prefix whose
// stdlib lacks .pyc (Debian's) or has timestamp-based ones, stale once packed with
// mtime 0, gets unchecked-hash .pyc compiled at build time by its own interpreter
// with layers/wheel's Compiler, reproducibly, into a copy of the prefix; the key
// names that compiled tree. Hash-based .pyc a prefix ships are kept.
//
// Tarballs are unpacked by oci/untar, the extractor the host cache unpacks layers
// with, under the same rules (no absolute paths or "..", no links leaving the
// tree, no devices, no setuid bits, no duplicates, bounded PAX records and
// sizes), with what a prefix needs besides: symlinks and hardlinks inside it.
//
// This package may use oci, oci/untar, internal/fsx, layers/target and layers/wheel. It must never import the
// registry client or cache, the broker, the sandbox, the catalog or the CLI.
// It never prints and never logs.
package interp
