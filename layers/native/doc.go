// Package native finds the shared libraries that a wheel's compiled code needs and
// that a sandbox will not have: it reads the DT_NEEDED and DT_RUNPATH/DT_RPATH entries
// of every ELF file in an installed wheel tree, looks each needed soname up where the
// dynamic loader would find it inside the tree ($ORIGIN-relative run paths, as
// auditwheel writes them for a wheel's vendored <pkg>.libs/), and reports the ones that
// are neither there nor on the manylinux (or musllinux) allow-list of libraries every
// compliant system provides.
//
// It exists because a wheel that links against a library of its build host (a Debian
// repack, a wheel built without auditwheel) installs and packs without complaint and
// only fails at "import numpy" inside a session, where the host's /usr is not mounted.
// The build runs Check on each tree so that the layer's author hears about it, naming
// the wheel, the sonames and the files that need them.
//
// ELF is read with the standard library's debug/elf: it is kept with the Go toolchain,
// fuzzed upstream, bounds its reads by the file's size, and needs no cgo. Nothing is run:
// ldd would execute the loader on untrusted files and readelf is not always installed.
// Only the section headers' dynamic table is read, as debug/elf does; a file stripped of
// its section headers has no needed libraries as far as this package can tell.
//
// The allow-lists follow auditwheel's policy files (manylinux-policy.json,
// musllinux-policy.json) and say nothing about symbol versions: a library on the list
// may still be too old for a wheel that targets a newer glibc.
//
// This package uses only the standard library. It must never import other pylayer
// packages (oci, registry, sandbox, broker, catalog, cmd) nor log or print.
package native
