// Package sbom describes a pylayer artifact as an SPDX 2.3 JSON document (a software bill
// of materials) for auditors: for a layer, one package per wheel of its lock with the
// wheel's name, version, sha256 checksum, purl (pkg:pypi/NAME@VERSION) and the license its
// METADATA declares (License-Expression, else License, else the License :: classifiers,
// else NOASSERTION; texts that are no SPDX expression of listed licenses are kept as
// LicenseRefs); for an interpreter, CPython's version and the digest of its prefix tree.
// The artifact itself is the package the document DESCRIBES, named after its tag, with
// the lock key or interpreter key in its comment.
//
// Generate reads nothing but the artifact (its manifest, config and layer blobs), so the
// same artifact gives the same bytes on every host and every run: no clock, no host
// name, no index URL. pylayer publishes the document as a signed in-toto attestation
// (oci/sign.Attest, predicate type https://spdx.dev/Document); `pylayer sbom` prints it
// after verifying that attestation.
//
// This package may use oci, oci/interp and layers/ (the lock, PEP 508 names). It must
// never import oci/sign (an SBOM is content, signing it is the caller's business), the
// registry client, the broker, the sandbox, the catalog or the CLI. It never prints and
// never logs.
package sbom
