// Package sign signs pylayer artifacts and verifies their signatures in cosign's
// classic, key-based, tag-based format, so that the stock cosign CLI and pylayer
// accept each other's signatures:
//
//	cosign verify --key cosign.pub --insecure-ignore-tlog=true REPO@DIGEST
//
// A signature of the manifest with digest sha256:<hex> lives in the manifest tagged
// sha256-<hex>.sig in the same repository: an OCI image manifest whose layers are
// "simple signing" payloads (application/vnd.dev.cosign.simplesigning.v1+json), each
// annotated dev.cosignproject.cosign/signature with the base64 signature of its bytes.
// The payload names the signed digest, so a signature copied onto another digest does
// not verify. Transparency logs, certificates and the newer bundle format are not used:
// trust is a set of public keys chosen by the operator.
//
// The package is transport-agnostic: Verify reads through the small, read-only Reader
// interface, Sign reads and writes through Store, and registry.Repo (a remote registry
// or an OCI layout) satisfies both.
// Key files are cosign's own: LoadSigner reads an encrypted private key written by
// `cosign generate-key-pair` or GenerateKeyPair, LoadVerifier reads PEM public keys.
//
// This package must never import pylayer's registry client (registry/), the broker,
// the sandbox, the catalog or the CLI (those build on it), nor cosign's CLI packages;
// it never calls go-containerregistry's remote package itself (cosign's library links
// it): all repository I/O goes through Reader and Store. The parent package oci must not import
// this one, so that assembling artifacts does not pull in the sigstore dependency
// tree. It never prints and never logs.
package sign
