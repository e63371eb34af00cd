// Package cache is pylayer's read-only host cache: verified layer blobs are
// unpacked once into content-addressed trees, and layer roots are made of those
// trees, so every session on a host shares one copy of each wheel.
//
//	<root>/trees/sha256/<blob>         the tree of one layer blob: a symlink to the
//	                                   layer that holds its files (its home,
//	                                   ../../layers/sha256/<manifest>), or a read-only
//	                                   directory of its own
//	<root>/trees/sha256/<blob>.files   what the tree must contain (path, mode, size, xxh64)
//	<root>/layers/sha256/<manifest>/   a layer root: its trees' files, plus
//	                                   .pylayer/manifest.json and .pylayer/lock.json
//	<root>/admissions/sha256/<manifest>.json
//	                                   who admitted the digest: each repository, trust
//	                                   rule and signing key (or explicit unsigned rule)
//	<root>/admissions/sha256/<manifest>.use.json
//	                                   what the first full check of the digest derived
//	                                   from its manifest and config, for later uses
//	                                   (userecord.go; registry/local.CheckUse)
//	<root>/refs/<name>                 ref name -> manifest digest (written by the CLI)
//	<root>/locks/                      flock files: layer-, tree-, hold-, admit-<hex>, gc
//	<root>/tmp/                        work in progress; nothing here is ever read back
//	<root>/unsynced/<boot>.<id>.json   what an install placed before its bytes were
//	                                   surely on disk (unsynced.go)
//
// Beside them the CLI keeps, and this package never reads: sessions/<id>/cache/, each
// broker session's cache directory (sandbox.Spec.Cache), and sandbox/v1-<hash>/, the
// support tree every sandbox binds (sandbox.Spec.Support: the pip shim, the guard,
// passwd and group, written once per content) with sandbox/pyc-<key>/, the guard's
// bytecode for each interpreter.
//
// Everything under trees/ and layers/ appears by one atomic rename (of a directory
// that is complete and read-only, or of a home's link), so a crash (kill -9 at any
// point) leaves nothing half-visible: leftovers stay under tmp/ and Open removes
// them once their lock is free. Against a crash of the machine, a directory is
// durable before its rename (one syncfs), or, where the kernel names its boot,
// recorded: a later boot's Open removes what such records name before anything
// is read, so an install need not wait for the disk (unsynced.go). An install unpacks its missing blobs in
// parallel, largest first: it fetches up to twice as many at once as there are
// cores (small blobs into memory, never written to tmp/) and unpacks one per
// core, each into a tree of its own under tmp/, so that fetches go on while the cores
// unpack. A tree the cache has already is linked into the layer as soon as it is
// found, one hardlink per file, relative to descriptors of its directories (one
// linkat each, no path walks). The trees the install unpacked are then renamed into
// the layer whole (layerBuild.merge): a directory that only one blob provides moves
// with everything below it, so a wheel costs a few renames and each file of a new
// layer is written once and has one name, no second pass over it. The layer becomes
// those trees' home (homes.go): trees/sha256/<blob> links to it, and a later layer
// that uses the blob hardlinks its files from there. One record of the new trees and
// the layer (or one syncfs, with writeback started in the background while it still
// unpacks, so that the syncfs finds little left to write) makes them safe to rename:
// file lists, homes, then the layer.
//
// Why a layer root holds the files, and not links or mounts of its trees:
//   - Directory symlinks into per-wheel trees would leave a path's ".." to the tree:
//     torch's libraries find the CUDA wheels' through $ORIGIN/../../nvidia, and code
//     that resolves __file__ looks for its neighbours beside it. pip installs every
//     wheel into one directory, and so must a layer.
//   - A sandbox mounts one directory per layer: bwrap 0.8 (Debian 12) has no
//     --overlay-src (it came in 0.9), and a bind mount per tree costs about 0.2 ms of
//     session start each (measured: 30 binds +5 ms, 90 binds +30 ms per bwrap start).
//
// Cross-process flock locks make many processes installing the same layer
// download and unpack each blob once; an install never waits for a tree lock
// while it holds trees not yet in place. A layer that a running sandbox holds
// (Hold) is never removed by GC.
//
// Archives are unpacked defensively by oci/untar (regular files and directories
// only, no links, devices, setuid bits, absolute or ".." paths, duplicate
// entries, unknown PAX records; entry count and sizes capped on the bytes
// actually read), and only after the blob matched its digest (oci.VerifyReader,
// run by the cache, or by the fetch's reader when that is a Verifier of the very
// blob: no blob is hashed twice). A gzip'd blob fetched into memory is then
// inflated one gzip member per call (untar.ExtractBytes; libdeflate in the shipped
// build, about twice as fast as streaming it, into one 4 MiB buffer per core for the
// members oci writes), so C code only ever reads bytes a signed manifest names. Install trusts its caller to have verified the manifest's signature; it
// re-checks that the manifest bytes match the digest.
//
// The cache remembers who admitted each digest (Admit, Admissions): every
// repository it came through, the trust rule that let it in and the keys that
// signed it, or that the rule accepted it unsigned. Records are replaced
// atomically under a lock, so concurrent admissions are all kept; they are read
// with no network, so that callers can re-check the current policy against them
// on every use. The cache keeps records and never judges them.
//
// The cache is for Linux and other unix systems (flock, hardlinks). It must
// never import package registry or any transport (it is handed a Fetch
// function), nor the sandbox, broker, catalog or CLI; it may import oci/,
// layers/ and internal/. It never prints and never logs: progress goes to a
// callback.
package cache
