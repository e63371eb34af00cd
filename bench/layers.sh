#!/usr/bin/env bash
# Layer build benchmark, both tools measured in this run on the same local index:
#   (1) cold build of the office set (python-docx, openpyxl, lxml, et-xmlfile, xlsxwriter):
#       `pylayer build` (download, verify, install, compile .pyc, pack reproducible blobs,
#       fsync) vs `pip install --target` of the same pinned wheels (download, install,
#       compile .pyc); the two alternate who goes first. Target: pip / pylayer >= 2.
#   (2) no-op rebuild: the same build again into the same layout, which already has the key.
# Prints medians of RUNS runs, the ratio and whether it meets the target, and checks that
# every cold build gave the same manifest digest. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-5}
PYLAYER=${PYLAYER:-bin/pylayer}
TARGET=2
PY=/usr/bin/python3.11
work=.bench; rm -rf "$work"; mkdir -p "$work"
go run ./test/cmd/mkindex -out "$work/index" >/dev/null
$PYLAYER index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
pids+=($!)
waitfile "$work/index.url" "pylayer index serve"
url=$(head -n1 "$work/index.url")
$PYLAYER lock python-docx openpyxl xlsxwriter --index-url "$url" --python 3.11 \
  --platform manylinux_2_28_x86_64 -o "$work/office.lock.json" --cache "$work/c0" >/dev/null
pins=$(python3 -c 'import json,sys; print(" ".join(p["name"]+"=="+p["version"] for p in json.load(open(sys.argv[1]))["packages"]))' "$work/office.lock.json")

plbuild() { # plbuild I: a cold build into a fresh cache and layout; prints the digest
  $PYLAYER build "$work/office.lock.json" --index-url "$url" --interpreter $PY -o "oci:$work/oci$1" --cache "$work/c$1"
}
pipinstall() {
  $PY -m pip install -q --no-cache-dir --disable-pip-version-check --no-deps --only-binary=:all: \
    --index-url "$url" --target "$work/pip$1" $pins 2>/dev/null
}
pl=(); pip=(); noop=(); digests=()
for i in $(seq "$RUNS"); do
  rm -rf "$work/c$i" "$work/oci$i" "$work/pip$i"
  if (( i % 2 )); then
    t0=$(now); d=$(plbuild "$i"); t1=$(now); pl+=($(( (t1-t0)/1000 )))
    t0=$(now); pipinstall "$i"; t1=$(now); pip+=($(( (t1-t0)/1000 )))
  else
    t0=$(now); pipinstall "$i"; t1=$(now); pip+=($(( (t1-t0)/1000 )))
    t0=$(now); d=$(plbuild "$i"); t1=$(now); pl+=($(( (t1-t0)/1000 )))
  fi
  digests+=("$d")
  # The same lock, interpreter and layout: the key is there, nothing is built.
  t0=$(now); $PYLAYER build "$work/office.lock.json" --interpreter $PY -o "oci:$work/oci$i" --cache "$work/c$i" >/dev/null; t1=$(now)
  noop+=($(( (t1-t0)/1000 )))
done
[[ $(printf '%s\n' "${digests[@]}" | sort -u | wc -l) == 1 ]] || die "cold builds gave different digests: ${digests[*]}"
mpl=$(printf '%s\n' "${pl[@]}" | median); mpip=$(printf '%s\n' "${pip[@]}" | median); mnoop=$(printf '%s\n' "${noop[@]}" | median)
ratio=$(echo "$mpip/$mpl" | bc -l)
met=MISSED; (( $(echo "$ratio >= $TARGET" | bc -l) )) && met=ok
printf 'office set, %d runs, medians (pip: %s)\n' "$RUNS" "$($PY -m pip --version | cut -d' ' -f1-2)"
printf '  pylayer build, cold cache     %8.1f ms  (every run: %s)\n' "$(echo "$mpl/1000" | bc -l)" "${digests[0]}"
printf '  pip install --target          %8.1f ms\n' "$(echo "$mpip/1000" | bc -l)"
printf '  ratio pip / pylayer           %8.2fx  (target >= %sx: %s)\n' "$ratio" "$TARGET" "$met"
printf '  pylayer no-op rebuild         %8.1f ms  (%.0fx faster than pip)\n' "$(echo "$mnoop/1000" | bc -l)" "$(echo "$mpip/$mnoop" | bc -l)"
