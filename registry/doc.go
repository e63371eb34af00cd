// Package registry moves pylayer artifacts between OCI registries, OCI layout directories
// and the host cache: push with blob dedup, resolve, verified fetch, and the trust policy
// that decides whose signatures are accepted.
//
// Trust is checked on every use, not only on fetch: VerifyRef checks the signature and that
// the manifest agrees with its own lock (CheckConsistent), Pull and Ensure record in the
// cache how each digest was admitted, and CheckUse re-decides, offline, from that record
// and the current policy whether a cached digest may be used from a repository. That
// offline half (references, CheckConsistent, CheckUse, and Ensure of a cached digest) is
// registry/local, under the same names here, so that pylayer's front end can run a
// session on a warm cache without linking the registry protocol.
//
// A tag or digest naming an image index of pylayer artifacts (oci.PlatformIndex) stands for
// its entry for the host's platform, or the one ForPlatform names (platform.go): the
// entry's signature is checked as any artifact's, and the index's too when it is signed.
//
// The registry protocol (remote.go, upload.go, resume.go, transport.go, blob.go) is spoken
// here over go-containerregistry's name, authn and transport (the auth handshake), not
// through its pkg/v1/remote, for measured reasons (ggcr_compare_test.go, v0.22.1):
//   - remote cannot resume a blob whose connection breaks mid-stream: its reader fails
//     where resumeBody continues with a Range request (TestGGCRRemoteGaps);
//   - its progress is a channel of byte counts, and what happened to each blob (present,
//     mounted, uploaded, retried: Event) goes to its global logs.Progress logger;
//   - its errors do not say where credentials were looked for, nor tell none from rejected
//     (TestGGCRRemoteGaps: "unexpected status code 401 Unauthorized"); it mounts only a
//     remote.MountableLayer (a blob read from the other repository); it leaves a local
//     blob that changed while it was sent to the registry's digest check;
//   - importing it runs 5 more package inits on every command, pylayer --version
//     included: +0.20 ms of init clock (mostly klauspost/compress's snapref), and 2.93 ms
//     wall without it against 3.33 ms with it (medians of 60 interleaved runs, GODEBUG=inittrace=1), past
//     the 3 ms start-up target;
//   - it is not faster: BenchmarkPush30 (30 blobs, 17 MiB, in-process registry) is 98
//     requests for a push into an empty registry against remote's 128 (POST, PATCH and
//     PUT per blob where upload.go sends one PUT), 42 against 94 MB allocated in the
//     process (the registry included), the same time within noise (29-42 against 31-51
//     ms); a push of blobs already present is 36 against 34 requests (a second handshake
//     for the push scope) and 2.0 against 1.7 ms; BenchmarkPull30 is 35 against 34
//     requests, 4.2k against 5.2k allocations, the same time within noise (about 20 ms:
//     hashing).
//
// What remote does that is the same job, verified fetch with a size check, HEAD before
// upload, the referrers API with its fallback tag, raw manifests of any config media type,
// is a few dozen lines each here. Revisit when remote resumes downloads and reports
// per-blob events without a global logger.
//
// It may import layers/, oci/ and internal/; it must never import sandbox, broker or catalog.
package registry
