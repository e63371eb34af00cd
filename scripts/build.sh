#!/usr/bin/env bash
# build.sh DIR: builds pylayer's two binaries into DIR, as they ship (make build, and the
# e2e suites when they build their own).
#
# bin/pylayer, the front end (-tags lean: run, exec and shell, which sessions call on every
# step, without the signing, SQLite, PostgreSQL and YAML code whose package init costs ~1.2 ms
# of each start), is pure Go (CGO_ENABLED=0): a static binary starts without the dynamic
# loader and libc (~0.35 ms of every command, `run` and `--version` included).
#
# bin/pylayer-full, every command, to which the front end hands every other command line, is
# built with cgo for one C library: libdeflate (Debian's libdeflate-dev), which inflates a
# pull's layer blobs twice as fast as pure Go (internal/gunzip). It is linked statically, libc
# included, so it needs nothing at run time either; netgo and osusergo keep Go's own DNS
# resolver and /etc/passwd reader (no NSS, which a static glibc cannot load).
set -euo pipefail
dir=${1:?usage: scripts/build.sh DIR}
go=${GO:-go}
cd "$(dirname "$0")/.."
echo '#include <libdeflate.h>' | "${CC:-cc}" -E - >/dev/null 2>&1 ||
  { echo "build.sh: no C compiler, or libdeflate.h is missing: apt-get install -y gcc libdeflate-dev (or make deps)" >&2; exit 1; }
mkdir -p "$dir"
CGO_ENABLED=1 "$go" build -tags libdeflate,netgo,osusergo -ldflags '-linkmode=external -extldflags=-static' \
  -o "$dir/pylayer-full" ./cmd/pylayer
CGO_ENABLED=0 "$go" build -tags lean -o "$dir/pylayer" ./cmd/pylayer
