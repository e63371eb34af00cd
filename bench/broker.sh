#!/usr/bin/env bash
# Broker benchmark: one `pylayer serve` on loopback (SQLite store, oci: layout repository,
# local index, a catalog that allowlists foo), N sessions, then N agents at once, each
# polling its env POLLS times, asking for foo (every DISTINCT-th agent for foo==2.0, the
# rest for foo==1.0: most requests bind an existing layer without a build) and long-polling
# the request until it is bound. bench/brokerload does the load and prints throughput,
# p50/p99/max per endpoint and the wall time. See bench/README.md.
#
#   make build && bash bench/broker.sh        # N=200 POLLS=3 DISTINCT=10 JOBS=2 by default
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

N=${N:-200}
POLLS=${POLLS:-3}
DISTINCT=${DISTINCT:-10}
JOBS=${JOBS:-2}
PYLAYER=${PYLAYER:-bin/pylayer}   # the binary under test

for v in N POLLS DISTINCT JOBS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v=${!v@Q}: want a non-negative integer"
done
(( N >= 1 && DISTINCT >= 1 && JOBS >= 1 )) || die "N, DISTINCT and JOBS must be at least 1"
command -v go >/dev/null || die "go is missing: put Go 1.26 on PATH (it builds bench/brokerload)"
[[ -x $PYLAYER ]] || die "$PYLAYER is missing: run 'make build' first"

work=.bench/broker
rmtree "$work"; mkdir -p "$work"

echo "building bench/brokerload ..." >&2
go build -o "$work/brokerload" ./bench/brokerload
"$work/brokerload" -write-wheels "$work/index"

"$PYLAYER" index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
pids+=($!)
waitfile "$work/index.url" "pylayer index serve"
url=$(head -n1 "$work/index.url")

echo "publishing the base (pin 1.0) as current ..." >&2
export COSIGN_PASSWORD=bench
repo="oci:$PWD/$work/repo"
"$PYLAYER" keygen --output-key-prefix "$work/cosign" >/dev/null
"$PYLAYER" lock pin --index-url "$url" --python 3.11 --platform manylinux_2_28_x86_64 \
  -o "$work/base.lock.json" >"$work/lock.log" 2>&1 || { cat "$work/lock.log" >&2; die "pylayer lock failed"; }
"$PYLAYER" --cache "$work/cache" publish "$work/base.lock.json" --repo "$repo" --key "$work/cosign.key" \
  --index-url "$url" --tag current >"$work/publish.log" 2>&1 || { cat "$work/publish.log" >&2; die "pylayer publish failed"; }

cat >"$work/catalog.json" <<'EOF'
{"base": ["pin"], "allow": [{"name": "foo"}]}
EOF
owner=$("$PYLAYER" token create --db "$work/broker.db" --role owner --subject bench)

"$PYLAYER" --cache "$work/cache" serve --listen 127.0.0.1:0 --db "$work/broker.db" --catalog "$work/catalog.json" \
  --repo "$repo" --key "$work/cosign.key" --index-url "$url" --jobs "$JOBS" >"$work/serve.url" 2>"$work/serve.log" &
pids+=($!)
waitfile "$work/serve.url" "pylayer serve"
burl=$(head -n1 "$work/serve.url")

specs=()
for ((i = 1; i < DISTINCT; i++)); do specs+=("foo==1.0"); done
specs+=("foo==2.0")
echo "running $N agents against $burl ..." >&2
"$work/brokerload" -url "$burl" -token "$owner" -n "$N" -polls "$POLLS" -specs "$(IFS=,; echo "${specs[*]}")"
# Distinct specs over one base: that many ext layers, each built and pushed once.
exts=$(grep -o '"org.opencontainers.image.ref.name": *"ext-[0-9a-f]*"' "$work/repo/index.json" | sort -u | wc -l)
echo "ext layers in the repository: $exts (distinct specs: $(printf '%s\n' "${specs[@]}" | sort -u | wc -l))"
