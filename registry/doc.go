// Package registry moves pylayer artifacts between OCI registries, OCI layout directories
// and the host cache: push with blob dedup, resolve, verified fetch, and the trust policy
// that decides whose signatures are accepted.
//
// It may import layers/ and oci/; it must never import sandbox, broker or catalog.
package registry
