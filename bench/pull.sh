#!/usr/bin/env bash
# Pull benchmark, pylayer and its peer measured in this run against one loopback registry
# (Debian's docker-registry, plain HTTP on 127.0.0.1, filesystem storage):
#   (1) cold pull + unpack of a signed layer set of >= 100 MB (N synthetic wheels):
#       `pylayer pull` into a fresh host cache (signature verification, digest checks, unpack,
#       read-only layer assembly) vs `crane pull --format oci` + `tar -xzf` of every layer
#       blob into one directory (no verification, no assembly); crane alone is shown too;
#   (2) bytes transferred when a second layer, sharing all but CHANGED wheels with the first,
#       is pulled into the cache that holds the first (from the registry's own request log).
# SET=curated measures a real set instead of the synthetic one: the curated base repacked from
# Debian's packages (go run ./test/cmd/mkindex -curated: numpy, matplotlib, Pillow, lxml, the
# office set ...), its .pyc compiled by Debian's python3.11 at publish as a CI would; its set b
# is the office subset, all of whose wheels set a has.
# Prints medians of RUNS runs, the ratios, and whether pylayer meets the target: at least
# TARGET (1.4) times faster than crane pull + tar -xzf. See bench/README.md.
#
#   make build && bash bench/pull.sh        # RUNS=5 N=30 CHANGED=2 PYLAYER=bin/pylayer by default
#   SET=curated bash bench/pull.sh          # the real set (N and CHANGED do not apply)
#   BASE=/tmp/pylayer.old bash bench/pull.sh  # also times an older build in the same runs, interleaved
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

RUNS=${RUNS:-5}
SET=${SET:-synthetic}    # synthetic (N generated wheels) or curated (a real set, see above)
N=${N:-30}               # wheels in the first layer
CHANGED=${CHANGED:-2}    # wheels the second layer has at another version
TAR_JOBS=${TAR_JOBS:-$(nproc)}
PYLAYER=${PYLAYER:-bin/pylayer} # another build to compare, e.g. one of an older commit
BASE=${BASE:-}           # an older build, timed in the same runs as PYLAYER (a before/after under one load)
MIN_MB=100               # the layer set must be at least this large, or the bench says so and fails
TARGET=1.4               # (crane pull + tar -xzf) / pylayer pull, cold, set a (issue 16)

[[ $SET == synthetic || $SET == curated ]] || die "SET=${SET@Q}: want synthetic or curated"
[[ $SET == synthetic ]] || CHANGED=0
for v in RUNS N CHANGED TAR_JOBS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ || ( $v == CHANGED && ${!v} == 0 ) ]] || die "$v=${!v@Q}: want a positive integer"
done
(( CHANGED <= N )) || die "CHANGED=$CHANGED is more than N=$N"
command -v go >/dev/null || die "go is missing: put Go 1.26 on PATH (it builds bench/mkwheels)"
[[ -x $PYLAYER ]] || die "$PYLAYER is missing: run 'make build' first"
[[ -z $BASE || -x $BASE ]] || die "BASE=${BASE@Q}: not an executable"
command -v docker-registry >/dev/null || die "docker-registry is missing: apt-get install -y docker-registry (or make deps)"
command -v python3 >/dev/null || die "python3 is missing: apt-get install -y python3"
crane=$(bash scripts/tools.sh crane) || die "could not build crane (scripts/tools.sh crane)"

work=${WORK:-$PWD/.bench/pull} # WORK: another directory, e.g. when another bench wipes .bench/
[[ $work == /*/?* ]] || die "WORK=${work@Q}: want an absolute path at least two levels deep (it is wiped)"
umount "$work/fs" 2>/dev/null || true # left mounted by a run killed before its cleanup
rmtree "$work"; mkdir -p "$work"
# Where the pulls and untars write (benchfs, bench/README.md): FS=fresh (the default, as root),
# a new ext4 file system made for this run; FS=host, the work directory's own. On the host's,
# what other work deleted there decides how fast new files are made: without a journal (this
# project's VMs), ext4 skips every inode deleted in the last 60 s (360 s while its inode table
# block is dirty) and tests each one again on every allocation in its group (find_inode_bit,
# recently_deleted in ext4/ialloc.c). In a profile of a pull right after an earlier bench's
# cleanup, that was 35% of pylayer's CPU, and as much of tar's, and it moved single runs of
# either tool by 2x. So FS=host syncs and times nothing until 61 s after the bench began.
benchfs "$work"
sync; quiet_at=$(( $(now) + 61000000000 ))
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }

# --- wheels, index, registry ----------------------------------------------------------------
if [[ $SET == curated ]]; then
  echo "writing the curated base (go run ./test/cmd/mkindex -curated) ..." >&2
  go run ./test/cmd/mkindex -out "$work/index" -curated >/dev/null
  command -v python3.11 >/dev/null || die "python3.11 is missing: apt-get install -y python3.11 (SET=curated compiles .pyc with it)"
else
  echo "generating $N wheels (+$CHANGED changed) ..." >&2
  go run ./bench/mkwheels -out "$work/index" -n "$N" -changed "$CHANGED" >/dev/null
fi

"$PYLAYER" index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
pids+=($!)
waitfile "$work/index.url" "pylayer index serve"
url=$(head -n1 "$work/index.url")

# A free port: bind port 0, read it, close. Another process may take it in between, so a
# registry that does not come up is retried on a new port.
start_registry() {
  local port try
  for try in 1 2 3; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
    cat >"$work/registry.yml" <<EOF
version: 0.1
log:
  level: info
  formatter: json
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: "$work/registry"
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: "127.0.0.1:$port"
  secret: "$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
EOF
    docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
    local pid=$!
    for _ in $(seq 200); do
      if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
        "http://127.0.0.1:$port/v2/" 2>/dev/null; then
        pids+=("$pid"); host=127.0.0.1:$port; return
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
    echo "docker-registry did not come up on port $port (try $try); its log:" >&2
    tail -n 5 "$work/registry.log" >&2
  done
  die "could not start docker-registry"
}
start_registry
repo=$host/bench/pylayer
echo "registry on $host, index at $url" >&2

# --- two locks, published and signed -----------------------------------------------------------
export COSIGN_PASSWORD=bench
"$PYLAYER" keygen --output-key-prefix "$work/cosign" >/dev/null
reqs_a=(); reqs_b=(); publish_flags=()
if [[ $SET == curated ]]; then
  reqs_a=(python-docx openpyxl xlsxwriter lxml pillow numpy matplotlib pypdf reportlab markdown pdfminer.six)
  reqs_b=(python-docx openpyxl xlsxwriter lxml)
  publish_flags=(--interpreter "$(command -v python3.11)")
  N=0 # the loop below adds nothing
fi
for ((i = 0; i < N; i++)); do
  name=$(printf 'bench-pkg-%02d' "$i")
  reqs_a+=("$name==1.0")
  if (( i >= N - CHANGED )); then reqs_b+=("$name==2.0"); else reqs_b+=("$name==1.0"); fi
done
for s in a b; do
  declare -n reqs=reqs_$s
  "$PYLAYER" lock "${reqs[@]}" --index-url "$url" --python 3.11 --platform manylinux_2_28_x86_64 \
    -o "$work/$s.lock.json" --cache "$work/pubcache" >/dev/null 2>"$work/lock-$s.log" ||
    { cat "$work/lock-$s.log" >&2; die "pylayer lock of set $s failed"; }
  echo "publishing set $s ..." >&2
  ref=$("$PYLAYER" publish "$work/$s.lock.json" --repo "$repo" --key "$work/cosign.key" \
    --index-url "$url" --cache "$work/pubcache" "${publish_flags[@]}" 2>"$work/publish-$s.log") ||
    { cat "$work/publish-$s.log" >&2; die "pylayer publish of set $s failed"; }
  printf -v "ref_$s" '%s' "$ref"
  unset -n reqs
done
[[ $ref_a == "$repo@sha256:"* && $ref_b == "$repo@sha256:"* ]] || die "publish printed unexpected refs: $ref_a $ref_b"

# manifest facts, from the registry as crane sees them: layer count, bytes, digests.
facts() { # facts REF FIELD: layers | bytes (manifest + config + layers) | digests
  "$crane" manifest --insecure "$1" | python3 -c '
import json, sys
raw = sys.stdin.buffer.read(); m = json.loads(raw); f = sys.argv[1]
if f == "layers": print(len(m["layers"]))
elif f == "bytes": print(len(raw) + m["config"]["size"] + sum(l["size"] for l in m["layers"]))
else: print("\n".join(l["digest"].split(":", 1)[1] for l in m["layers"]))
' "$2"
}
layers_a=$(facts "$ref_a" layers); bytes_a=$(facts "$ref_a" bytes)
layers_b=$(facts "$ref_b" layers); bytes_b=$(facts "$ref_b" bytes)
facts "$ref_a" digests >"$work/a.layers"
[[ $SET == curated ]] || (( bytes_a >= MIN_MB * 1000000 )) || die "layer set a is $(mb "$bytes_a") MB, below $MIN_MB MB: raise N"

# --- (1) cold pull + unpack --------------------------------------------------------------------
pull_pylayer() { # pull_pylayer REF CACHE [BIN]: prints the layer root
  "${3:-$PYLAYER}" pull "$1" --trust "$work/cosign.pub" --cache "$2" 2>>"$work/pull.log" ||
    { tail -n 20 "$work/pull.log" >&2; die "pylayer pull $1 failed"; }
}
pull_crane() { # pull_crane REF LAYOUT
  "$crane" pull --insecure "$1" --format oci "$2" 2>>"$work/crane.log" ||
    { tail -n 20 "$work/crane.log" >&2; die "crane pull $1 failed"; }
}
untar() { # untar LAYOUT DIR: every layer blob of set a, TAR_JOBS at a time, into DIR
  mkdir -p "$2"
  sed "s|^|$1/blobs/sha256/|" "$work/a.layers" | xargs -P "$TAR_JOBS" -I{} tar -xzf {} -C "$2" ||
    die "tar -xzf of the blobs in $1 failed"
}

wait_s=$(( (quiet_at - $(now)) / 1000000000 + 1 ))
if [[ $FS == host ]] && (( wait_s > 0 )); then
  echo "waiting ${wait_s} s for the inodes deleted before this bench to age out of ext4's window ..." >&2
  sleep "$wait_s"
fi
echo "warm-up (registry page cache) and sanity check ..." >&2
pull_crane "$ref_a" "$fs/warm"
root=$(pull_pylayer "$ref_a" "$fs/warm-cache")
untar "$fs/warm" "$fs/warm-x"
# Both sides must produce the same tree, or the bench compares different jobs. pylayer adds
# only its .pylayer/ metadata (the lock and the manifest) to a layer root.
(cd "$root" && find -L . -path ./.pylayer -prune -o -type f -print | LC_ALL=C sort) >"$work/files.pylayer"
(cd "$fs/warm-x" && find . -type f | LC_ALL=C sort) >"$work/files.crane"
cmp -s "$work/files.pylayer" "$work/files.crane" ||
  die "pylayer's layer and crane+tar's tree differ: diff $work/files.pylayer $work/files.crane"
nfiles=$(wc -l <"$work/files.crane")

# Nothing is deleted while runs are timed (see chattr above): the warm-up's and the runs' trees
# (about 350 MB a run) are removed after the last run.
pl=(); bl=(); cr=(); tx=(); ct=(); cts=(); plcpu=(); blcpu=(); ctcpu=(); timed=("$fs/warm" "$fs/warm-x" "$fs/warm-cache")
TIMEFORMAT='%3U %3S' # bash's time: user and system CPU seconds of the command and its children
cpu() { awk '{ printf "%d", ($1 + $2) * 1000000 }' "$1"; } # cpu FILE: user+sys of a `time` line, in us
# settle: what each timed tool starts from, the same for each. The dirty pages of the one
# before are written back (sync: pylayer's syncfs would pay for them), and, as root, the page
# cache is dropped and the registry's blobs read back into it. Without the drop, the page
# cache grows by ~350 MB a run, and on this project's VMs a page the guest has not used before
# costs the host a fault on first touch: pylayer's pull of the curated set went from
# 0.34-0.52 s (0.25-0.46 s system CPU) to 0.74-0.83 s (0.86-0.98 s system CPU, in
# copy_folio_from_iter_atomic and clear_page_erms) as the cache reached 7 GB, and back after
# a drop, so the median of a run depended on which runs came after a few GB of others' files.
# The tools' own binaries are read back too, so that no side pays for paging its code in.
settle() {
  sync
  if [[ -w /proc/sys/vm/drop_caches ]]; then
    echo 3 >/proc/sys/vm/drop_caches
    find "$work/registry" -type f -exec cat {} + >/dev/null
    cat "$PYLAYER" "$(dirname "$PYLAYER")/pylayer-full" ${BASE:+"$BASE"} "$crane" "$(command -v tar)" "$(command -v gzip)" >/dev/null 2>&1 || true
  fi
}
for ((i = 1; i <= RUNS; i++)); do
  echo "run $i/$RUNS ..." >&2
  order=(pylayer crane); ((i % 2)) || order=(crane pylayer) # alternate who goes first
  if [[ -n $BASE ]]; then # rotate the three
    case $((i % 3)) in 1) order=(pylayer base crane) ;; 2) order=(base crane pylayer) ;; 0) order=(crane pylayer base) ;; esac
  fi
  for who in "${order[@]}"; do
    settle
    if [[ $who == pylayer ]]; then
      t0=$(now); { time pull_pylayer "$ref_a" "$fs/cache$i" >/dev/null 2>&3; } 3>&2 2>"$work/cpu"; t1=$(now)
      pl+=($(((t1 - t0) / 1000))); plcpu+=($(cpu "$work/cpu"))
      timed+=("$fs/cache$i")
    elif [[ $who == base ]]; then
      t0=$(now); { time pull_pylayer "$ref_a" "$fs/base$i" "$BASE" >/dev/null 2>&3; } 3>&2 2>"$work/cpu"; t1=$(now)
      bl+=($(((t1 - t0) / 1000))); blcpu+=($(cpu "$work/cpu"))
      timed+=("$fs/base$i")
    else
      t0=$(now); { time { pull_crane "$ref_a" "$fs/oci$i"; t1=$(now); untar "$fs/oci$i" "$fs/x$i"; } 2>&3; } 3>&2 2>"$work/cpu"; t2=$(now)
      sync -f "$fs/x$i"; t3=$(now) # pylayer makes what it writes durable (syncfs); this is the peer's equivalent
      cr+=($(((t1 - t0) / 1000))); tx+=($(((t2 - t1) / 1000))); ct+=($(((t2 - t0) / 1000))); cts+=($(((t3 - t0) / 1000)))
      ctcpu+=($(cpu "$work/cpu"))
      timed+=("$fs/oci$i" "$fs/x$i")
    fi
  done
done
mpl=$(printf '%s\n' "${pl[@]}" | median); mcr=$(printf '%s\n' "${cr[@]}" | median)
mtx=$(printf '%s\n' "${tx[@]}" | median); mct=$(printf '%s\n' "${ct[@]}" | median)
mcts=$(printf '%s\n' "${cts[@]}" | median)
mplcpu=$(printf '%s\n' "${plcpu[@]}" | median); mctcpu=$(printf '%s\n' "${ctcpu[@]}" | median)
if [[ -n $BASE ]]; then mbl=$(printf '%s\n' "${bl[@]}" | median); mblcpu=$(printf '%s\n' "${blcpu[@]}" | median); fi
for d in "${timed[@]}"; do rmtree "$d"; done

# --- (2) bytes transferred for a second, overlapping layer ---------------------------------------
# Sum of http.response.written over the requests the registry logged from line $1 on.
served() {
  sleep 0.3 # the registry logs a request after answering it
  tail -n +"$1" "$work/registry.log" | python3 -c '
import json, sys
total = gets = 0
for line in sys.stdin:
    try: e = json.loads(line)
    except ValueError: continue
    if "http.response.status" not in e: continue
    total += int(e.get("http.response.written", 0))
    if e.get("http.request.method") == "GET" and "/blobs/" in e.get("http.request.uri", ""): gets += 1
print(total, gets)'
}
mark() { echo $(($(wc -l <"$work/registry.log") + 1)); }
m0=$(mark); pull_pylayer "$ref_a" "$fs/delta-cache" >/dev/null; read -r sent_a gets_a < <(served "$m0")
m1=$(mark); pull_pylayer "$ref_b" "$fs/delta-cache" >/dev/null; read -r sent_b gets_b < <(served "$m1")
rmtree "$fs/delta-cache"

# --- summary ----------------------------------------------------------------------------------
ms() { awk -v u="$1" 'BEGIN { printf "%.1f", u / 1000 }'; }
# spread US...: "(min-max)" in ms, so a noisy run shows itself.
spread() { printf '%s\n' "$@" | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "(%.0f-%.0f)", lo / 1000, hi / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", 100 * a / b }'; }
echo
printf 'pull benchmark: %d runs, medians (min-max); loopback docker-registry %s, %d CPUs, crane %s\n' \
  "$RUNS" "$(docker-registry --version 2>/dev/null | awk '{print $NF}')" "$(nproc)" "$("$crane" version 2>/dev/null)"
printf 'load average at the end: %s (other work on the machine makes every number noisier)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'trees written to %s (FS=%s)\n' "$fs_desc" "$FS"
printf 'layer set a (%s): %d wheels, %s MB of blobs, %d files (signed); set b shares %d of %d wheels\n' \
  "$SET" "$layers_a" "$(mb "$bytes_a")" "$nfiles" "$((layers_b - CHANGED))" "$layers_b"
printf '(1) cold pull + unpack of set a\n'
printf '  pylayer pull (verify, fetch, unpack, assemble)   %9s ms  %s\n' "$(ms "$mpl")" "$(spread "${pl[@]}")"
if [[ -n $BASE ]]; then
  printf '  BASE pylayer pull (%s)  %9s ms  %s  CPU %s ms; ratio BASE / pylayer %sx\n' "$(basename "$BASE")" \
    "$(ms "$mbl")" "$(spread "${bl[@]}")" "$(ms "$mblcpu")" "$(ratio "$mbl" "$mpl")"
fi
printf '  crane pull --format oci                          %9s ms  %s\n' "$(ms "$mcr")" "$(spread "${cr[@]}")"
printf '  tar -xzf of every layer blob (%d jobs)            %9s ms  %s\n' "$TAR_JOBS" "$(ms "$mtx")" "$(spread "${tx[@]}")"
printf '  crane pull + tar -xzf                            %9s ms  %s\n' "$(ms "$mct")" "$(spread "${ct[@]}")"
printf '  ratio (crane + tar) / pylayer                    %9sx  (above 1: pylayer is faster)\n' "$(ratio "$mct" "$mpl")"
printf '  target (crane + tar) / pylayer >= %sx          %9s\n' "$TARGET" \
  "$(awk -v a="$mct" -v b="$mpl" -v t="$TARGET" 'BEGIN { print (a / b >= t ? "met" : "MISSED") }')"
printf '  ratio crane alone / pylayer                      %9sx\n' "$(ratio "$mcr" "$mpl")"
printf '  crane pull + tar -xzf + sync -f (durable peer)   %9s ms  (ratio to pylayer %sx)\n' \
  "$(ms "$mcts")" "$(ratio "$mcts" "$mpl")"
printf '  CPU (user+sys): pylayer %s ms, crane + tar %s ms  (ratio %sx; the registry'"'"'s own CPU is in neither)\n' \
  "$(ms "$mplcpu")" "$(ms "$mctcpu")" "$(ratio "$mctcpu" "$mplcpu")"
printf '(2) bytes the registry served\n'
printf '  cold pull of set a          %9s MB in %3d blob GETs  (%s%% of set a, %s MB)\n' \
  "$(mb "$sent_a")" "$gets_a" "$(pct "$sent_a" "$bytes_a")" "$(mb "$bytes_a")"
printf '  set b after set a           %9s MB in %3d blob GETs  (%s%% of set b, %s MB)\n' \
  "$(mb "$sent_b")" "$gets_b" "$(pct "$sent_b" "$bytes_b")" "$(mb "$bytes_b")"
printf '  ratio full set b / transferred  %5sx\n' "$(ratio "$bytes_b" "$sent_b")"
