// Package gunzip inflates a gzip stream held in memory in one call (Whole), a zip
// member's deflate stream in one call (Deflated), or one gzip member per call into a
// buffer of a member's size (NewMembers: the layer blobs oci
// writes are members of oci.GzipMember bytes of tar each), with
// libdeflate where pylayer is built with cgo and the libdeflate build tag (as
// scripts/build.sh builds pylayer-full, the binary that pulls). That is about
// twice as fast as the fastest pure-Go inflater (klauspost/compress: 340-380 ms
// vs 150-175 ms for a 28 MB gzip-6 tar of Debian's /usr/lib/python3 on this
// project's 2-core machines), and inflating is the larger part of a cold pull's
// CPU (38% of it in a profile of the curated set).
//
// Why a binding of our own: libdeflate (Debian's libdeflate-dev, linked
// statically) is a maintained, widely fuzzed C library, but no Go binding of it
// is served by the module proxy pylayer builds from, and the one call pylayer
// needs, libdeflate_gzip_decompress_ex, takes a dozen lines of cgo.
//
// Whole is a fast path, never a second decoder with rules of its own: it answers
// ok only for a single-member stream with the plain 10-byte header (no optional
// fields) that inflates to exactly the size its trailer states, its CRC-32
// checked, within a limit. Everything else (a bad stream included) is left to
// the caller's streaming reader, whose errors are the ones users see. Where both
// accept a stream they yield the same bytes (FuzzWhole checks this against
// klauspost/compress/gzip). libdeflate is more lenient in one known way: a run of
// code lengths overrunning a dynamic block's count, which it ignores and zlib and
// Go refuse as corrupt. No encoder writes one; such a blob unpacks with Whole and
// is refused without it (TestWholeLeniency). NewMembers follows the same rules
// member by member (each plain, each checked; the first it cannot inflate into its
// buffer makes it decline, and the caller streams the whole stream again). Without
// cgo and the tag (make unit, a plain go build), neither is ever ok.
//
// Whole runs C on a blob's bytes. The host cache calls it only after the blob
// matched the digest a verified manifest names, so a stream crafted to attack
// the decoder would have to be signed by a trusted key first.
//
// Deflated inflates one raw deflate stream (a zip member's data) into a buffer of
// its stated size, its CRC-32 checked, under the same rules (exactly that, or
// decline). The wheel installer calls it only for wheels its caller trusts as
// much as the lock that pinned their hash (wheel.InstallOptions.TrustedBytes: a
// user's own build), never for a broker's builds, which install agents' uploads.
package gunzip
