// Package e2e holds the end-to-end suites: the pylayer binary, built from ./cmd/pylayer,
// against a local index that pylayer itself serves (the generated corpus, Debian's real
// wheels and the office set repacked from Debian), with pip 23.2.1 as the oracle for
// resolution and installation; and against Debian's docker-registry (TLS, htpasswd) and
// OCI layouts, with the stock cosign and crane CLIs checking what pylayer publishes. They
// need python3 (pyenv CPython 3.11), apt-get and dpkg, and fail rather than skip when one
// is missing.
//
// Everything is in _test.go files; this package must never be imported. It drives pylayer
// through its command line; library packages are used only to compare installs
// (layers/wheel) and to forge hostile artifacts that the CLI must refuse.
package e2e
