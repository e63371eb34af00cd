// Package oci defines pylayer's OCI 1.1 artifact format and writes it, bit for
// bit reproducibly, into OCI image layout directories.
//
// It knows the media types and annotations of pylayer artifacts (DESIGN.md,
// "Artifact format"), builds reproducible gzip'd tar layers from a directory
// tree (TarTree), assembles deterministic image manifests (Artifact.Manifest),
// and stores and reads blobs, manifests and tags in a layout directory
// (Layout), verifying the digest and size of every blob it reads or writes
// (VerifyReader, the one streaming verifier that the registry client and the
// host cache use too). A multi-platform artifact is an OCI image index of such
// artifacts, one per platform (PlatformIndex, imageindex.go), from which a host takes
// its own entry (SelectPlatform, HostPlatform); wheel platform tags map to OCI
// platforms with PlatformOf.
//
// Digests are sha256 only. Every digest that comes from outside (an index.json,
// a manifest, a caller) is parsed and validated before it names a file, so a
// hostile digest can never address a path outside blobs/.
//
// This package must never import the registry client (registry/, remote
// registries, go-containerregistry's remote package), the broker, the sandbox,
// the catalog or the CLI: those build on it. It may use layers/ (the lock, and
// the per-wheel trees of layers/build, which fromlock.go packs into an artifact)
// and internal/fsx, never the other way round; its subpackage oci/untar builds on
// it, never the other way round. It never prints and never logs.
package oci
