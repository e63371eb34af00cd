#!/usr/bin/env bash
# Lock benchmark, both tools measured in this run on the same local indexes: resolving the
# same 10 requirements (21 packages: the office set, Debian's pip, setuptools and wheel, and
# corpus projects with extras, markers and chains) with `pylayer lock` and with
# `pip install --dry-run --report`, cold (empty caches), against
#   (1) `pylayer index serve`: PEP 691 JSON with sizes and PEP 658 metadata files;
#   (2) a plain PEP 503 index over the same directory (bench/plainindex): HTML with #sha256=
#       fragments, no sizes, no metadata files. pylayer reads each candidate's METADATA with
#       range requests and fetches the wheels it locks for their sizes; pip downloads every
#       candidate wheel.
# Prints medians of RUNS runs, the ratio pip / pylayer and the target (10x).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-5}
PY=${PY:-python3.11}
PYLAYER=${PYLAYER:-bin/pylayer}
TARGET=10
REQS=(python-docx openpyxl xlsxwriter pip setuptools wheel chain-a 'ex-app[full]' 'mk-app[opt]' norm.user)
work=.bench/lock; rmtree "$work"; mkdir -p "$work"
[[ -x $PYLAYER ]] || die "$PYLAYER missing: run make build"
$PY -m pip install --help | grep -q -- --dry-run || die "$PY's pip has no --dry-run --report (want pip >= 22.2)"

go run ./test/cmd/mkindex -corpus -out "$work/index" >/dev/null
go build -o "$work/plainindex" ./bench/plainindex
$PYLAYER index serve "$work/index" --listen 127.0.0.1:0 >"$work/meta.url" 2>"$work/meta.log" &
pids+=($!)
"$work/plainindex" "$work/index" >"$work/plain.url" 2>"$work/plain.log" &
pids+=($!)
waitfile "$work/meta.url" "pylayer index serve"
waitfile "$work/plain.url" "bench/plainindex"
declare -A url=([meta]=$(head -n1 "$work/meta.url") [plain]=$(head -n1 "$work/plain.url"))

pl() { # pl KIND RUN: a cold pylayer lock
  rm -rf "$work/c-$1-$2"
  $PYLAYER lock "${REQS[@]}" --index-url "${url[$1]}" --python 3.11 --platform manylinux_2_28_x86_64 \
    -o "$work/$1.lock.json" --cache "$work/c-$1-$2" --json >"$work/$1.out"
}
pipdry() { # pipdry KIND: a cold pip resolution
  $PY -m pip install -q --isolated --no-cache-dir --disable-pip-version-check --dry-run --report "$work/$1.pip.json" \
    --ignore-installed --only-binary=:all: --index-url "${url[$1]}" "${REQS[@]}" 2>"$work/$1.pip.log"
}
pins() { python3 -c 'import json,sys; print(" ".join(sorted(p["name"]+"=="+p["version"] for p in json.load(open(sys.argv[1]))["packages"])))' "$1"; }
pippins() { python3 -c '
import json,re,sys
r=json.load(open(sys.argv[1]))
print(" ".join(sorted(re.sub(r"[-_.]+","-",i["metadata"]["name"]).lower()+"=="+i["metadata"]["version"] for i in r["install"])))' "$1"; }
key() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["key"])' "$1"; }

# Warm-up (not timed): fills the page cache and the servers' hash caches, and checks that
# both tools resolve the same set and that pylayer writes one lock key for both indexes.
for k in meta plain; do
  pl "$k" 0; pipdry "$k"
  [[ $(pins "$work/$k.lock.json") == $(pippins "$work/$k.pip.json") ]] ||
    die "$k index: pylayer locked $(pins "$work/$k.lock.json"), pip resolved $(pippins "$work/$k.pip.json")"
done
[[ $(key "$work/meta.out") == $(key "$work/plain.out") ]] || die "the two indexes gave different lock keys"
npkg=$(pins "$work/plain.lock.json" | wc -w)

declare -A tpl tpip
for i in $(seq "$RUNS"); do
  for k in meta plain; do
    if (( i % 2 )); then
      t0=$(now); pl "$k" "$i"; t1=$(now); pipdry "$k"; t2=$(now)
      tpl[$k]+="$(( (t1-t0)/1000 )) "; tpip[$k]+="$(( (t2-t1)/1000 )) "
    else
      t0=$(now); pipdry "$k"; t1=$(now); pl "$k" "$i"; t2=$(now)
      tpip[$k]+="$(( (t1-t0)/1000 )) "; tpl[$k]+="$(( (t2-t1)/1000 )) "
    fi
  done
done

printf 'lock of %d requirements (%d packages), cold, %d runs, medians (pip: %s)\n' "${#REQS[@]}" "$npkg" "$RUNS" "$($PY -m pip --version | cut -d' ' -f1-2)"
printf '  %-38s %10s %10s %8s %8s\n' index "pylayer" "pip" ratio target
for k in meta plain; do
  mpl=$(tr ' ' '\n' <<<"${tpl[$k]}" | grep . | median); mpip=$(tr ' ' '\n' <<<"${tpip[$k]}" | grep . | median)
  ratio=$(echo "$mpip/$mpl" | bc -l)
  verdict=ok; (( $(echo "$ratio < $TARGET" | bc -l) )) && verdict=MISSED
  name="with metadata files (index serve)"; [[ $k == plain ]] && name="plain PEP 503 (no metadata, no sizes)"
  printf '  %-38s %7.1f ms %7.1f ms %7.1fx %5dx %s\n' "$name" "$(echo "$mpl/1000" | bc -l)" "$(echo "$mpip/1000" | bc -l)" "$ratio" "$TARGET" "$verdict"
done
