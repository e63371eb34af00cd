#!/usr/bin/env bash
# Warm-session benchmark: one `pylayer serve` on loopback (SQLite, an oci: layout repository
# with the office set published as current, built with .pyc by /usr/bin/python3.11), one
# session; bench/execload times N warm POST /v1/sessions/{id}/exec round trips of `pass`
# and of `import docx, openpyxl` after the first call (HTTP, the executor, the persistent
# Python process in the session's bwrap sandbox, and back), against `pylayer run --session`
# of the same cells in the same run (a new sandbox and interpreter each call), and prints
# p50/p99 and the ratios. Target: a warm exec of pass at p50 <= 5 ms. See bench/README.md.
#
#   make build && bash bench/exec.sh        # N=200 RUNS=20; under a minute
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

N=${N:-200}
RUNS=${RUNS:-20}
PY=/usr/bin/python3.11
for v in N RUNS; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v@Q}: want a positive integer"; done
command -v go >/dev/null || die "go is missing: put Go 1.26 on PATH (it builds bench/execload and test/cmd/mkindex)"
[[ -x bin/pylayer ]] || die "bin/pylayer is missing: run 'make build' first"
[[ -x $PY ]] || die "$PY is missing: apt-get install -y python3.11"
command -v bwrap >/dev/null || die "bwrap is missing: apt-get install -y bubblewrap"

# Sessions started by root run as an unprivileged user, which must reach the cache and the
# workspaces: a checkout under a private directory cannot hold them.
work=$PWD/.bench/exec
if ((EUID == 0)) && ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$PWD" 2>/dev/null; then
  work=/var/tmp/pylayer-bench-exec
fi
rmtree "$work"; mkdir -p "$work"
export PYLAYER_CACHE=$work/cache COSIGN_PASSWORD=bench PYLAYER_TRUST=$work/bench.pub

echo "setting up: the office set, a signed base as current, pylayer serve ..." >&2
go build -o "$work/execload" ./bench/execload
go run ./test/cmd/mkindex -out "$work/index" >/dev/null
bin/pylayer index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
pids+=($!)
waitfile "$work/index.url" "pylayer index serve"
url=$(head -n1 "$work/index.url")
bin/pylayer keygen --output-key-prefix "$work/bench" >/dev/null
bin/pylayer lock python-docx openpyxl xlsxwriter --index-url "$url" --python 3.11 \
  --platform manylinux_2_28_x86_64 -o "$work/office.lock.json" >/dev/null
repo="oci:$work/repo"
bin/pylayer publish "$work/office.lock.json" --repo "$repo" --key "$work/bench.key" --index-url "$url" \
  --interpreter "$PY" --tag current >/dev/null 2>>"$work/errors.log" || die "publish failed (see $work/errors.log)"
echo '{"base": ["python-docx", "openpyxl", "xlsxwriter"], "allow": []}' >"$work/catalog.json"
db=$work/broker.db
owner=$(bin/pylayer token create --db "$db" --role owner --subject bench)
bin/pylayer serve --listen 127.0.0.1:0 --db "$db" --data "$work/uploads" --catalog "$work/catalog.json" \
  --repo "$repo" --key "$work/bench.key" --index-url "$url" --sessions-dir "$work/sessions" >"$work/serve.url" 2>"$work/serve.log" &
pids+=($!)
waitfile "$work/serve.url" "pylayer serve"
broker=$(head -n1 "$work/serve.url")

echo "timing $N warm exec calls of each cell, $RUNS pylayer run --session calls of each ..." >&2
echo "machine: $(nproc) CPUs, $(uname -r), $($PY -V 2>&1), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/execload" -url "$broker" -token "$owner" -db "$db" -repo "$repo" -n "$N" -runs "$RUNS" -pylayer bin/pylayer
