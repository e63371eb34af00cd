// Package e2e holds the end-to-end suites: the pylayer binary, built from ./cmd/pylayer,
// against a local index that pylayer itself serves (the generated corpus, Debian's real
// wheels and the office set repacked from Debian), with pip 23.2.1 as the oracle for
// resolution and installation. They need python3 (pyenv CPython 3.11), apt-get and dpkg,
// and fail rather than skip when one is missing.
//
// Everything is in _test.go files; this package must never be imported, and it talks to
// pylayer only through its command line, plus layers/wheel for the install comparison.
package e2e
