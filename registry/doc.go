// Package registry moves pylayer artifacts between OCI registries, OCI layout directories
// and the host cache: push with blob dedup, resolve, verified fetch, and the trust policy
// that decides whose signatures are accepted.
//
// Trust is checked on every use, not only on fetch: VerifyRef checks the signature and that
// the manifest agrees with its own lock (CheckConsistent), Pull and Ensure record in the
// cache how each digest was admitted, and CheckUse re-decides, offline, from that record
// and the current policy whether a cached digest may be used from a repository.
//
// A tag or digest naming an image index of pylayer artifacts (oci.PlatformIndex) stands for
// its entry for the host's platform, or the one ForPlatform names (platform.go): the
// entry's signature is checked as any artifact's, and the index's too when it is signed.
//
// It may import layers/, oci/ and internal/; it must never import sandbox, broker or catalog.
package registry
