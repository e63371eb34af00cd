// Package publish puts an artifact into a repository once: resolve its tag, build and push
// it only when the repository lacks it, sign it (every time: signing what the same key
// signed already writes nothing, and a push that died before signing gets its signature),
// attach its SPDX SBOM (oci/sbom) as an in-toto attestation signed with the same key
// (unless that key attested it already; an artifact published without one gets it from
// its blobs in the repository), and point extra tags at it. `pylayer publish`, `pylayer interpreter publish` and the
// broker's builder all publish through Publish. PublishIndex publishes the
// artifacts of one requirements set locked for several platforms, each through Publish, and
// puts them under one tag as a signed OCI image index (oci.PlatformIndex).
//
// It sits below the CLI and the broker and above registry: it may import layers, oci and
// registry, and must never import broker, sandbox, catalog or the CLI.
package publish
