#!/usr/bin/env bash
# Layer build benchmark, both tools measured in this run on the same local index:
#   (1) cold build of the office set (python-docx, openpyxl, lxml, et-xmlfile, xlsxwriter):
#       `pylayer build` (download, verify, install, compile .pyc, pack reproducible blobs,
#       fsync) vs `pip install --target` of the same pinned wheels (download, install,
#       compile .pyc); the order rotates from run to run. Target: pip / pylayer >= 2.
#       BASE=PATH times another pylayer binary too (an older build) in the same runs;
#       WORK=DIR works in a new directory under DIR instead of .bench/layers.
#   (2) no-op rebuild: the same build again into the same layout, which already has the key.
# Prints medians of RUNS runs, the ratios and whether pylayer meets the target, and checks
# that every cold build gave the same manifest digest. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-5}
PYLAYER=${PYLAYER:-bin/pylayer}
BASE=${BASE:-}
TARGET=2
PY=/usr/bin/python3.11
if [[ -n ${WORK:-} ]]; then # a directory of one's choice, e.g. on a quieter file system
  mkdir -p "$WORK"; work=$(mktemp -d "$(cd "$WORK" && pwd)/layers.XXXXXX")
else
  work=$PWD/.bench/layers
  umount "$work/fs" 2>/dev/null || true # left mounted by a run killed before its cleanup
  rm -rf "$work"
fi
mkdir -p "$work"
# Both tools create their files under $fs (pip stages --target installs in $TMPDIR): by
# default a fresh file system made for this run (benchfs, FS=fresh), or with FS=host the work
# directory itself, and the run removes them when it ends, not the next run when it starts.
# On ext4, making a file near many deleted in the last minutes costs up to a millisecond
# more: the two make theirs in the same place, and no run pays for its predecessor.
benchfs "$work"
mkdir -p "$fs/tmp"
export TMPDIR=$fs/tmp
trap 'cleanup; rm -rf "$work"' EXIT
go run ./test/cmd/mkindex -out "$work/index" >/dev/null
$PYLAYER index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
pids+=($!)
waitfile "$work/index.url" "pylayer index serve"
url=$(head -n1 "$work/index.url")
$PYLAYER lock python-docx openpyxl xlsxwriter --index-url "$url" --python 3.11 \
  --platform manylinux_2_28_x86_64 -o "$work/office.lock.json" --cache "$work/c0" >/dev/null
pins=$(python3 -c 'import json,sys; print(" ".join(p["name"]+"=="+p["version"] for p in json.load(open(sys.argv[1]))["packages"]))' "$work/office.lock.json")

declare -A ms digests
tools=(pylayer pip); [[ -n $BASE ]] && tools+=(base)
cold() { # cold TOOL I: one cold build or install into fresh directories; prints its time
  local t0 t1 d=""
  t0=$(now)
  case $1 in
  pylayer | base)
    local bin=$PYLAYER; [[ $1 == base ]] && bin=$BASE
    d=$($bin build "$work/office.lock.json" --index-url "$url" --interpreter $PY -o "oci:$fs/oci-$1$2" --cache "$fs/c-$1$2")
    digests[$1]+="$d " ;;
  pip)
    $PY -m pip install -q --no-cache-dir --disable-pip-version-check --no-deps --only-binary=:all: \
      --index-url "$url" --target "$fs/pip$2" $pins 2>/dev/null ;;
  esac
  t1=$(now)
  ms[$1]+="$(( (t1-t0)/1000 )) "
}
noop=()
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq "$RUNS"); do
  n=${#tools[@]}
  for k in $(seq 0 $((n-1))); do cold "${tools[$(( (i+k) % n ))]}" "$i"; done
  # The same lock, interpreter and layout: the key is there, nothing is built.
  t0=$(now); $PYLAYER build "$work/office.lock.json" --interpreter $PY -o "oci:$fs/oci-pylayer$i" --cache "$fs/c-pylayer$i" >/dev/null; t1=$(now)
  noop+=($(( (t1-t0)/1000 )))
done
med() { printf '%s\n' $1 | median; }
for t in pylayer base; do
  [[ -z ${digests[$t]:-} ]] && continue
  [[ $(printf '%s\n' ${digests[$t]} | sort -u | wc -l) == 1 ]] || die "$t: cold builds gave different digests: ${digests[$t]}"
done
mpip=$(med "${ms[pip]}"); mpl=$(med "${ms[pylayer]}"); mnoop=$(printf '%s\n' "${noop[@]}" | median)
ratio=$(echo "$mpip/$mpl" | bc -l)
met=MISSED; (( $(echo "$ratio >= $TARGET" | bc -l) )) && met=ok
printf 'office set, %d runs, medians (pip: %s; files in %s, %s, FS=%s)\n' "$RUNS" "$($PY -m pip --version | cut -d' ' -f1-2)" "$fs" "$fs_desc" "$FS"
# The 2-core machine is shared: a ratio measured under load says little (pip suffers more).
printf '  load average before / after   %s / %s\n' "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '  pylayer build, cold cache     %8.1f ms  (every run: %s)\n' "$(echo "$mpl/1000" | bc -l)" "${digests[pylayer]%% *}"
if [[ -n $BASE ]]; then
  mbase=$(med "${ms[base]}")
  printf '  base build (%s)  %8.1f ms  (ratio pip / base %.2fx)\n' "$BASE" "$(echo "$mbase/1000" | bc -l)" "$(echo "$mpip/$mbase" | bc -l)"
fi
printf '  pip install --target          %8.1f ms\n' "$(echo "$mpip/1000" | bc -l)"
printf '  ratio pip / pylayer           %8.2fx  (target >= %sx: %s)\n' "$ratio" "$TARGET" "$met"
printf '  pylayer no-op rebuild         %8.1f ms  (%.0fx faster than pip)\n' "$(echo "$mnoop/1000" | bc -l)" "$(echo "$mpip/$mnoop" | bc -l)"
