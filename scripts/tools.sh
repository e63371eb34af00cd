#!/usr/bin/env bash
# tools.sh NAME: print the path of a stock tool the tests and the demo run, building it once
# with `go install` into ${PYLAYER_TOOLS:-$HOME/.cache/pylayer/tools}/NAME-VERSION.
#
#   scripts/tools.sh cosign   # the stock cosign CLI (v2.6.5)
#   scripts/tools.sh crane    # go-containerregistry's crane, the version in go.mod
#   scripts/tools.sh all      # build both, print both paths
#
# stdout carries the path only; build output goes to stderr. A build goes into a temporary
# GOBIN next to its final place and is renamed into place whole, under a flock(1) lock, so
# two callers never build twice and nobody ever sees half a tool.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${PYLAYER_TOOLS:-$HOME/.cache/pylayer/tools}
GO=${GO:-go}

die() { echo "tools.sh: $*" >&2; exit 1; }

# go_mod_version MODULE: the version go.mod requires, so crane matches the library we link.
go_mod_version() {
	awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' \
		"$here/go.mod"
}

# build NAME PACKAGE VERSION: print the path of NAME, building PACKAGE@VERSION when missing.
build() {
	local name=$1 pkg=$2 version=$3
	case $version in v[0-9]*) ;; *) die "bad version ${version@Q} for $name" ;; esac
	local dir=$TOOLS/$name-$version
	local bin=$dir/$name
	if [[ -x $bin ]]; then
		echo "$bin"
		return
	fi
	command -v flock >/dev/null || die "flock(1) is missing: apt-get install util-linux"
	command -v "$GO" >/dev/null || die "$GO is missing: install Go or set GO=/path/to/go"
	mkdir -p "$TOOLS/locks"
	local lock fd
	lock=$TOOLS/locks/$name-$version.lock
	exec {fd}>"$lock"
	flock "$fd"
	if [[ ! -x $bin ]]; then
		local tmp
		tmp=$(mktemp -d "$TOOLS/.tmp-$name-$version.XXXXXX")
		echo "tools.sh: building $pkg@$version into $dir" >&2
		if ! (cd "$tmp" && GOBIN="$tmp" GOWORK=off GOFLAGS=-trimpath CGO_ENABLED=0 \
			"$GO" install "$pkg@$version") >&2; then
			rm -rf "$tmp"
			die "building $pkg@$version failed (is the Go module proxy reachable?)"
		fi
		if [[ ! -x $tmp/$name ]]; then
			rm -rf "$tmp"
			die "go install $pkg@$version did not produce $name"
		fi
		chmod 0755 "$tmp"
		# A leftover directory without the binary (a crash before this script existed, a
		# manual mkdir) is replaced; we hold the lock, so nobody else is using it.
		[[ -e $dir ]] && rm -rf "$dir"
		mv -T "$tmp" "$dir"
	fi
	flock -u "$fd"
	exec {fd}>&-
	echo "$bin"
}

cosign() { build cosign github.com/sigstore/cosign/v2/cmd/cosign v2.6.5; }
crane() {
	local v
	v=$(go_mod_version github.com/google/go-containerregistry)
	[[ -n $v ]] || die "github.com/google/go-containerregistry is not in $here/go.mod"
	build crane github.com/google/go-containerregistry/cmd/crane "$v"
}

case ${1:-} in
cosign) cosign ;;
crane) crane ;;
all) cosign; crane ;;
*) die "usage: tools.sh cosign|crane|all" ;;
esac
