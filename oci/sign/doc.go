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
// Each signature manifest Sign tags is also stored as an OCI 1.1 referrer of the signed
// manifest (referrers.go), as `cosign sign --registry-referrers-mode=oci-1-1` stores it,
// so that `oras discover`, `regctl artifact list` and `cosign verify --experimental-oci11`
// see it: the same layers, with artifactType application/vnd.dev.cosign.artifact.sig.v1+json
// and a subject, pushed by digest, and listed by the registry's referrers API
// (GET /v2/<name>/referrers/<digest>) or, for a registry without it and in an OCI layout,
// appended to the image index tagged sha256-<hex> (the distribution spec's referrers tag
// schema). Verify reads the classic tag first, then the referrers, so it accepts a
// signature cosign stored either way.
//
// Attestations are stored as `cosign attest` stores them in tag mode (attest.go):
//
//	cosign verify-attestation --key cosign.pub --insecure-ignore-tlog=true --type spdxjson REPO@DIGEST
//
// An in-toto statement (https://in-toto.io/Statement/v0.1) naming the repository and the
// sha256 digest as its subject, with a predicate such as an SPDX document
// (PredicateTypeSPDX), is signed in a DSSE envelope (dsse.go: payload type
// application/vnd.in-toto+json, the signature over DSSE's pre-authentication encoding
// with the same keys and algorithms as signatures) and appended as a layer of media type
// application/vnd.dsse.envelope.v1+json, annotated predicateType and with an empty
// dev.cosignproject.cosign/signature, to the manifest tagged sha256-<hex>.att.
// VerifyAttestations trusts only what the envelope's signature covers: the subject and
// predicate type inside the statement, never the layer's annotations.
//
// cosign v2.6.5 writes attestations as referrers only in the sigstore bundle format,
// which this package does not use, so attestations stay in the tag.
//
// The package is transport-agnostic: Verify and VerifyAttestations read through the
// small, read-only Reader interface, Sign and Attest read and write through Store, and
// registry.Repo (a remote registry or an OCI layout) satisfies both; a Reader that also
// implements ReferrersLister (registry.Repo of a remote registry) is asked for referrers
// through the referrers API before the fallback tag.
// Key files are cosign's own: LoadSigner reads an encrypted private key written by
// `cosign generate-key-pair` or GenerateKeyPair (scrypt and NaCl secretbox, through
// go-securesystemslib's encrypted package, the code cosign uses), LoadVerifier reads
// PEM public keys.
//
// Why this is not cosign's library: the classic format is a JSON payload, one signature
// over its bytes with the standard library's ECDSA, RSA or Ed25519, and an image manifest
// (manifest.go). cosign's library links sigstore's whole tree (TUF, Rekor, Fulcio, gRPC,
// OpenAPI, BSON), whose package initialisation ran before every pylayer command, `run`
// and `--version` included: 334 package inits and 7.3 ms (GODEBUG=inittrace=1) against
// 150 and 3.4 ms without it, and a 48 MB binary against 28 MB. TestInteropStockCosign
// and TestInteropAttestStockCosign keep the two implementations in agreement: the stock
// cosign CLI verifies what Sign and Attest write, Verify and VerifyAttestations accept
// what `cosign sign` and `cosign attest` write, and both refuse the same tampering.
//
// This package must never import pylayer's registry client (registry/), the broker,
// the sandbox, the catalog or the CLI (those build on it), nor oci/sbom (it signs any
// predicate), nor sigstore's or cosign's packages; it never calls go-containerregistry's remote package: all repository I/O
// goes through Reader and Store. The parent package oci must not import
// this one, so that assembling artifacts does not pull in the sigstore dependency
// tree. It never prints and never logs.
package sign
