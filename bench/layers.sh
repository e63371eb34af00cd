#!/usr/bin/env bash
# Layer build benchmark, both tools measured in this run on the same local index:
#   (1) cold build of the office set (python-docx, openpyxl, lxml, et-xmlfile, xlsxwriter):
#       `pylayer build` (download, verify, install, compile .pyc, pack reproducible blobs)
#       vs `pip install --target` of the same pinned wheels (download, install, compile .pyc);
#   (2) no-op rebuild of a key that is already built.
# Prints medians of RUNS runs and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-5}
PY=/usr/bin/python3.11
work=.bench; rm -rf "$work"; mkdir -p "$work"
go run ./test/cmd/mkindex -out "$work/index" >/dev/null
bin/pylayer index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
pids+=($!)
waitfile "$work/index.url" "pylayer index serve"
url=$(head -n1 "$work/index.url")
bin/pylayer lock python-docx openpyxl xlsxwriter --index-url "$url" --python 3.11 \
  --platform manylinux_2_28_x86_64 -o "$work/office.lock.json" --cache "$work/c0" >/dev/null
pins=$(python3 -c 'import json,sys; print(" ".join(p["name"]+"=="+p["version"] for p in json.load(open(sys.argv[1]))["packages"]))' "$work/office.lock.json")

pl=(); pip=(); noop=()
for i in $(seq "$RUNS"); do
  rm -rf "$work/c$i" "$work/oci$i" "$work/pip$i"
  t0=$(now); bin/pylayer build "$work/office.lock.json" --index-url "$url" --interpreter $PY -o "oci:$work/oci$i" --cache "$work/c$i" >/dev/null; t1=$(now)
  pl+=($(( (t1-t0)/1000 )))
  t0=$(now); $PY -m pip install -q --no-cache-dir --disable-pip-version-check --no-deps --only-binary=:all: --index-url "$url" --target "$work/pip$i" $pins 2>/dev/null; t1=$(now)
  pip+=($(( (t1-t0)/1000 )))
  t0=$(now); bin/pylayer build "$work/office.lock.json" -o "oci:$work/oci$i" --cache "$work/c$i" >/dev/null; t1=$(now)
  noop+=($(( (t1-t0)/1000 )))
done
mpl=$(printf '%s\n' "${pl[@]}" | median); mpip=$(printf '%s\n' "${pip[@]}" | median); mnoop=$(printf '%s\n' "${noop[@]}" | median)
printf 'office set, %d runs, medians (pip: %s)\n' "$RUNS" "$($PY -m pip --version | cut -d' ' -f1-2)"
printf '  pylayer build, cold cache     %8.1f ms\n' "$(echo "$mpl/1000" | bc -l)"
printf '  pip install --target          %8.1f ms\n' "$(echo "$mpip/1000" | bc -l)"
printf '  ratio pip / pylayer           %8.2fx\n' "$(echo "$mpip/$mpl" | bc -l)"
printf '  pylayer no-op rebuild         %8.1f ms  (%.0fx faster than pip)\n' "$(echo "$mnoop/1000" | bc -l)" "$(echo "$mpip/$mnoop" | bc -l)"
