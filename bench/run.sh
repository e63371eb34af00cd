#!/usr/bin/env bash
# Session benchmark: what a `pylayer run` costs against running the same Python on the host,
# all measured in this run on this machine (see bench/README.md):
#   (a) session overhead: `pylayer run --layer REPO@DIGEST -- python3 -c pass` (warm cache,
#       bwrap sandbox, degraded mode on Debian's python3.11) vs bare `/usr/bin/python3.11 -c pass`;
#       beside it, the floors it is made of: bwrap alone with a minimal argv and the same
#       interpreter, and that with prlimit(1) as its first program, as a session has
#       (sandbox.Prlimit), so that pylayer's own part is the difference to the last;
#   (b) first import of docx + openpyxl in a fresh session vs a bare host import of the
#       same files (PYTHONPATH=<layer root>/site-packages), both with PYTHONDONTWRITEBYTECODE=1
#       and PYTHONNOUSERSITE=1 as in the sandbox, both using the .pyc files compiled at
#       build time (the layer is built with --interpreter /usr/bin/python3.11);
#   (c) (b)'s session vs a fresh venv + `pip install --no-index --find-links` of the same
#       wheels + the import: what a workspace without pylayer does;
#   (d) what hardening costs: a session as hardened (sandbox user, seccomp, prlimit limits,
#       read-only /proc/sys and /dev, sized tmpfs, --disable-userns) vs the same session as
#       pylayer ran it before (sandbox's BenchmarkSessionHardening), alternating in one run;
#   (e) start-up: `pylayer --version` vs starting /bin/true, and GODEBUG=inittrace=1's count
#       and total of package inits (before: 334 inits, 7.3 ms, with cosign's library linked);
#       beside them a static Go program that prints a line (the Go runtime's own start, the
#       floor of any Go front end on this machine);
#   (f) the curated base (numpy, matplotlib, Pillow, reportlab, pypdf, markdown, the office
#       set; go run ./test/cmd/mkindex -curated) on the Debian python3.11 interpreter artifact
#       (stdlib .pyc compiled at publish): `import numpy, matplotlib.pyplot, PIL, docx,
#       openpyxl, reportlab, pypdf, markdown` timed inside the process in a warm session
#       (host cache and the session's font cache warm) vs the same interpreter tree and layer
#       files run on the host; and the whole session run vs a fresh venv + pip install of the
#       same wheels + the import.
# Prints medians of RUNS runs, differences and ratios, and a summary table. BASE=PATH times
# another pylayer binary (an older build) in (a) and (e) too, in the same runs.
#
#   make build && bash bench/run.sh        # RUNS=10 by default; under ~3 minutes
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

RUNS=${RUNS:-10}
BASE=${BASE:-}
PY=/usr/bin/python3.11
IMPORT='import docx, openpyxl'

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS=${RUNS@Q}: want a positive integer"
command -v go >/dev/null || die "go is missing: put Go 1.26 on PATH (it builds test/cmd/mkindex)"
[[ -x bin/pylayer ]] || die "bin/pylayer is missing: run 'make build' first"
[[ -z $BASE || -x $BASE ]] || die "BASE=${BASE@Q}: not an executable"
[[ -x $PY ]] || die "$PY is missing: apt-get install -y python3.11 python3.11-venv"
command -v bwrap >/dev/null || die "bwrap is missing: apt-get install -y bubblewrap"
$PY -c 'import ensurepip, venv' 2>/dev/null || die "$PY has no venv/ensurepip: apt-get install -y python3.11-venv"

work=$PWD/.bench/run
rmtree "$work"; mkdir -p "$work"
ms() { awk -v n="$1" 'BEGIN { printf "%.1f", n / 1e6 }'; }
diff_ms() { awk -v s="$1" -v b="$2" 'BEGIN { printf "%+.1f", (s - b) / 1e6 }'; } # diff_ms NS NS0: ms more, signed
# timed FILE CMD...: run CMD (quiet; any failure aborts the bench), append its ns to FILE.
timed() {
  local f=$1 t0 t1; shift
  t0=$(now)
  "$@" >/dev/null 2>>"$work/errors.log" || die "failed: $* (see $work/errors.log)"
  t1=$(now)
  echo $((t1 - t0)) >>"$f"
}

# --- setup (not timed): the office set, a signed layer in an OCI layout, a warm cache ------
export PYLAYER_CACHE=$work/cache COSIGN_PASSWORD=bench PYLAYER_TRUST=$work/bench.pub
echo "writing the office set (go run ./test/cmd/mkindex) ..." >&2
go run ./test/cmd/mkindex -out "$work/index" >/dev/null
bin/pylayer index serve "$work/index" --listen 127.0.0.1:0 >"$work/index.url" 2>"$work/index.log" &
pids+=($!)
waitfile "$work/index.url" "pylayer index serve"
url=$(head -n1 "$work/index.url"); [[ $url == http://127.0.0.1:* ]] || die "pylayer index serve did not start; see $work/index.log"
bin/pylayer lock python-docx openpyxl xlsxwriter --index-url "$url" --python 3.11 \
  --platform manylinux_2_28_x86_64 -o "$work/office.lock.json" >/dev/null
bin/pylayer keygen --output-key-prefix "$work/bench" >/dev/null
ref=$(bin/pylayer publish "$work/office.lock.json" --repo "oci:$work/repo" --key "$work/bench.key" \
  --index-url "$url" --interpreter "$PY" 2>>"$work/errors.log")
root=$(bin/pylayer pull "$ref" 2>>"$work/errors.log")
sp=$root/site-packages
ls "$sp"/docx/__pycache__/*.cpython-311.pyc >/dev/null 2>&1 || die "the layer has no .pyc for $PY: was it built with --interpreter?"
session() { bin/pylayer run --layer "$ref" -- python3 -c "$1"; }
base_session() { "$BASE" run --layer "$ref" -- python3 -c "$1"; }
bare() { env -i PATH=/usr/bin:/bin HOME="$work" PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 ${2:+PYTHONPATH=$2} "$PY" -c "$1"; }
# The floors of (a): bwrap with a minimal argv (the issue's "bwrap alone"), and the same with
# the session's first program, prlimit(1) with a session's default limits, before Python.
minbwrap() {
  env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 bwrap --unshare-all --die-with-parent \
    --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
    --proc /proc --dev /dev --tmpfs /tmp -- "$@"
}
bwrap_alone() { minbwrap "$PY" -c "$1"; }
bwrap_prlimit() { minbwrap /usr/bin/prlimit --nproc=512 --as=2147483648 --nofile=1024 --fsize=1073741824 --core=0 -- "$PY" -c "$1"; }
# Both must work, from the expected files, before anything is timed.
session 'import docx, sys; assert docx.__file__.startswith("/opt/pylayer/layers/"), docx.__file__' 2>/dev/null \
  || die "a session cannot import docx from the layer"
bare "import docx; assert docx.__file__.startswith('$sp'), docx.__file__" "$sp" || die "the bare import does not use the layer's files"
bwrap_prlimit 'import resource; assert resource.getrlimit(resource.RLIMIT_NPROC)[0] == 512' 2>>"$work/errors.log" ||
  die "bwrap with a minimal argv cannot run $PY under prlimit (see $work/errors.log)"
venv_import() {
  local d; d=$(mktemp -d "$work/venv.XXXXXX")
  "$PY" -m venv "$d" &&
    "$d/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$work/index" python-docx openpyxl xlsxwriter &&
    "$d/bin/python" -c "$IMPORT"
  local rc=$?; rm -rf "$d"; return $rc
}
# Warm-up, not timed: page cache, bwrap, the venv's ensurepip wheels.
session pass 2>/dev/null; bare pass; session "$IMPORT" 2>/dev/null; bare "$IMPORT" "$sp"; venv_import
[[ -z $BASE ]] || base_session pass 2>/dev/null || die "BASE=$BASE cannot run a session"

# --- measurements: the two sides alternate who goes first -----------------------------------
for i in $(seq "$RUNS"); do
  echo "run $i/$RUNS ..." >&2
  if ((i % 2)); then
    timed "$work/a.session" session pass; timed "$work/a.bare" bare pass
    timed "$work/b.session" session "$IMPORT"; timed "$work/b.bare" bare "$IMPORT" "$sp"
  else
    timed "$work/a.bare" bare pass; timed "$work/a.session" session pass
    timed "$work/b.bare" bare "$IMPORT" "$sp"; timed "$work/b.session" session "$IMPORT"
  fi
  timed "$work/a.bwrap" bwrap_alone pass; timed "$work/a.prlimit" bwrap_prlimit pass
  [[ -z $BASE ]] || timed "$work/a.base" base_session pass
  timed "$work/c.venv" venv_import
done

m() { median <"$work/$1"; }
a_s=$(m a.session) a_b=$(m a.bare) b_s=$(m b.session) b_b=$(m b.bare) c_v=$(m c.venv)
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { printf "%.2f", x / y }'; }
verdict() { awk -v v="$1" -v g="$2" -v op="$3" 'BEGIN { ok = (op == "<" ? v < g : v >= g); print (ok ? "ok" : "MISSED") }'; }
over=$(diff_ms "$a_s" "$a_b")
rb=$(ratio "$b_s" "$b_b") rc=$(ratio "$c_v" "$b_s")

cat <<EOF
pylayer run benchmark: medians of $RUNS runs, $(nproc) CPUs, $(uname -r), $($PY -V 2>&1)
layer: $ref (office set, .pyc compiled by $PY; warm host cache)
bare side: env -i PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 [PYTHONPATH=<layer>/site-packages] $PY,
  i.e. the same files, flags and .pyc as in the sandbox, which never writes .pyc either

| measure                                   | pylayer run | peer      | result          | goal            |
|-------------------------------------------|-------------|-----------|-----------------|-----------------|
| (a) python3 -c pass                       | $(printf '%8s ms' "$(ms "$a_s")") | $(printf '%6s ms' "$(ms "$a_b")") | $(printf '%7s ms more ' "$over") | <= 15 ms $(verdict "$over" 15.0000001 "<") |
| (b) import docx, openpyxl (fresh session) | $(printf '%8s ms' "$(ms "$b_s")") | $(printf '%6s ms' "$(ms "$b_b")") | $(printf '%7sx of bare' "$rb") | <= 1.20x $(verdict "$rb" 1.2000001 "<") |
| (c) venv + pip install + import           | $(printf '%8s ms' "$(ms "$b_s")") | $(printf '%6s ms' "$(ms "$c_v")") | $(printf '%7sx faster ' "$rc") | >= 15x   $(verdict "$rc" 15 ">=") |
EOF
a_w=$(m a.bwrap) a_p=$(m a.prlimit)
cat <<EOF
| (a) floor: bwrap alone, minimal argv      | $(printf '%8s ms' "$(ms "$a_w")") | $(printf '%6s ms' "$(ms "$a_b")") | $(printf '%7s ms more ' "$(diff_ms "$a_w" "$a_b")") | (floor)         |
| (a) floor: bwrap + prlimit, as a session  | $(printf '%8s ms' "$(ms "$a_p")") | $(printf '%6s ms' "$(ms "$a_b")") | $(printf '%7s ms more ' "$(diff_ms "$a_p" "$a_b")") | (floor)         |
| (a) the rest: pylayer and its mounts      | $(printf '%8s ms' "$(ms "$a_s")") | $(printf '%6s ms' "$(ms "$a_p")") | $(printf '%7s ms more ' "$(diff_ms "$a_s" "$a_p")") | (what is ours)  |
EOF
if [[ -n $BASE ]]; then
  a_x=$(m a.base)
  printf '| (a) BASE python3 -c pass                  | %8s ms | %6s ms | %7s ms more  | (before)        |\n' "$(ms "$a_x")" "$(ms "$a_b")" \
    "$(diff_ms "$a_x" "$a_b")"
fi

# --- (d) what hardening costs: the same session hardened and as before, alternating, in the
# sandbox package's own benchmark (the unhardened sandbox cannot be asked for from the CLI).
echo "measuring the hardening cost (go test -bench BenchmarkSessionHardening) ..." >&2
go test -run '^$' -bench '^BenchmarkSessionHardening$' -benchtime 20x -count "$RUNS" ./sandbox/ 2>>"$work/errors.log" |
  awk '/^BenchmarkSessionHardening\/hardened/ { print $3 >> "'"$work"'/d.hardened" }
       /^BenchmarkSessionHardening\/unhardened/ { print $3 >> "'"$work"'/d.unhardened" }'
[[ -s $work/d.hardened && -s $work/d.unhardened ]] || die "the hardening benchmark printed nothing (see $work/errors.log)"
d_h=$(m d.hardened) d_u=$(m d.unhardened)
cost=$(awk -v h="$d_h" -v u="$d_u" 'BEGIN { printf "%+.2f", (h - u) / 1e6 }')
cat <<EOF
| (d) hardening: python3 -S -c pass         | $(printf '%8s ms' "$(ms "$d_h")") | $(printf '%6s ms' "$(ms "$d_u")") | $(printf '%7s ms more ' "$cost") | <= 2 ms  $(verdict "$cost" 2.0000001 "<") |
EOF

# --- (e) start-up: `pylayer --version` against the floor of starting any process (/bin/true),
# both spawned by one small timer (a shell's date calls would cost more than what is timed),
# and the package initialisation GODEBUG=inittrace=1 reports before main.
echo "measuring start-up (pylayer --version, /bin/true) ..." >&2
# The Go floor: a static Go program that prints one line, built here by the same toolchain.
mkdir -p "$work/gofloor"
printf 'module gofloor\n\ngo 1.26\n' >"$work/gofloor/go.mod"
printf 'package main\n\nimport "os"\n\nfunc main() { os.Stdout.WriteString("gofloor\\n") }\n' >"$work/gofloor/main.go"
(cd "$work/gofloor" && CGO_ENABLED=0 go build -trimpath -o gofloor .) 2>>"$work/errors.log" || die "building the Go floor failed (see $work/errors.log)"
read -r v_med v_floor v_go v_base < <(python3 - "$((RUNS * 20))" bin/pylayer "$work/gofloor/gofloor" "$BASE" <<'PY'
import statistics, subprocess, sys, time
n, exe, gofloor, base = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
cmds = [[exe, "--version"], ["/bin/true"], [gofloor]] + ([[base, "--version"]] if base else [])
ts = [[] for _ in cmds]
for c in cmds:
    for _ in range(20): subprocess.run(c, stdout=subprocess.DEVNULL, check=True)
for i in range(n):  # interleaved: the load others put on the machine falls on each alike
    for k, c in enumerate(cmds):
        t = time.perf_counter_ns(); subprocess.run(c, stdout=subprocess.DEVNULL, check=True); ts[k].append(time.perf_counter_ns() - t)
print(*[int(statistics.median(t)) for t in ts])
PY
)
[[ -n ${v_med:-} && -n ${v_floor:-} ]] || die "timing pylayer --version failed"
inittrace() { GODEBUG=inittrace=1 "$1" --version 2>&1 >/dev/null | awk '/^init / { n++; t += $5 } END { printf "%d inits %.1f ms", n, t }'; }
inits=$(inittrace bin/pylayer)
cat <<EOF
| (e) pylayer --version (/bin/true as peer) | $(printf '%8s ms' "$(ms "$v_med")") | $(printf '%6s ms' "$(ms "$v_floor")") | $(printf '%-15s' "$inits") | < 3 ms   $(verdict "$(ms "$v_med")" 3 "<") |
| (e) floor: a static Go hello-world        | $(printf '%8s ms' "$(ms "$v_go")") | $(printf '%6s ms' "$(ms "$v_floor")") | $(printf '%7s ms more ' "$(diff_ms "$v_go" "$v_floor")") | (floor)         |
| (e) pylayer's own: --version over Go's    | $(printf '%8s ms' "$(ms "$v_med")") | $(printf '%6s ms' "$(ms "$v_go")") | $(printf '%7s ms more ' "$(diff_ms "$v_med" "$v_go")") | (what is ours)  |
EOF
if [[ -n $BASE ]]; then
  printf '| (e) BASE --version                        | %8s ms | %6s ms | %-15s | (before)        |\n' "$(ms "$v_base")" "$(ms "$v_floor")" "$(inittrace "$BASE")"
fi

# --- (f) the curated base: the import users do, in a warm session vs the same files on the
# host with the same interpreter (timed inside the process, so bwrap's start is not in it),
# and the session vs a fresh venv + pip install of the same wheels.
echo "setting up the curated base (mkindex -curated, the Debian prefix, publish) ..." >&2
CIMPORT='import numpy, matplotlib.pyplot, PIL, docx, openpyxl, reportlab, pypdf, markdown'
CREQS=(python-docx openpyxl xlsxwriter lxml pillow numpy matplotlib pypdf reportlab markdown pdfminer.six)
go run ./test/cmd/mkindex -out "$work/curated-index" -curated >/dev/null
prefix=$(go run ./test/cmd/pyprefix -out "$work/python")
bin/pylayer index serve "$work/curated-index" --listen 127.0.0.1:0 >"$work/cindex.url" 2>"$work/cindex.log" &
pids+=($!)
waitfile "$work/cindex.url" "pylayer index serve"
curl_=$(head -n1 "$work/cindex.url")
pyref=$(bin/pylayer interpreter publish "$prefix" --repo "oci:$work/repo" --key "$work/bench.key" 2>>"$work/errors.log")
bin/pylayer lock "${CREQS[@]}" --index-url "$curl_" --python-from "$pyref" -o "$work/curated.lock.json" >/dev/null 2>>"$work/errors.log" ||
  die "locking the curated base failed (see $work/errors.log)"
curref=$(bin/pylayer publish "$work/curated.lock.json" --repo "oci:$work/repo" --key "$work/bench.key" \
  --index-url "$curl_" --interpreter "$prefix" 2>>"$work/errors.log")
pyroot=$(bin/pylayer pull "$pyref" 2>>"$work/errors.log")
curroot=$(bin/pylayer pull "$curref" 2>>"$work/errors.log")
mkdir -p "$work/scache" "$work/hcache"
timer="import time; t = time.perf_counter(); $CIMPORT; print(int((time.perf_counter() - t) * 1e9))"
csession() { bin/pylayer run --python "$pyref" --layer "$curref" --cache-dir "$work/scache" -- python3 -c "$1"; }
chost() {
  env -i PATH=/usr/bin:/bin HOME="$work" PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 MPLBACKEND=Agg \
    MPLCONFIGDIR="$work/hcache/matplotlib" XDG_CACHE_HOME="$work/hcache" PYTHONPATH="$curroot/site-packages" "$pyroot/bin/python3" -c "$1"
}
cvenv() {
  local d; d=$(mktemp -d "$work/cvenv.XXXXXX")
  "$PY" -m venv "$d" &&
    "$d/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$work/curated-index" "${CREQS[@]}" &&
    env MPLBACKEND=Agg MPLCONFIGDIR="$work/hcache/matplotlib" "$d/bin/python" -c "$CIMPORT"
  local rc=$?; rm -rf "$d"; return $rc
}
csession 'import numpy, sys; assert numpy.__file__.startswith("/opt/pylayer/layers/"), numpy.__file__; assert sys.prefix == "/opt/python"' 2>>"$work/errors.log" ||
  die "a session on the curated base cannot import numpy from its layer (see $work/errors.log)"
# Warm-up, not timed: the page cache, both font caches, the venv's ensurepip wheels.
for _ in 1 2; do csession "$CIMPORT" >/dev/null 2>&1; chost "$CIMPORT" >/dev/null 2>&1; done
cvenv >/dev/null 2>&1 || die "a fresh venv + pip install of the curated wheels failed"
echo "measuring the curated import ($RUNS runs each) ..." >&2
for i in $(seq "$RUNS"); do
  if ((i % 2)); then
    csession "$timer" >>"$work/f.session" 2>>"$work/errors.log"; chost "$timer" >>"$work/f.host" 2>>"$work/errors.log"
  else
    chost "$timer" >>"$work/f.host" 2>>"$work/errors.log"; csession "$timer" >>"$work/f.session" 2>>"$work/errors.log"
  fi
  timed "$work/f.run" csession "$CIMPORT"
done
for i in $(seq $(( (RUNS + 2) / 3 ))); do timed "$work/f.venv" cvenv; done
f_s=$(m f.session) f_h=$(m f.host) f_r=$(m f.run) f_v=$(m f.venv)
rf=$(ratio "$f_s" "$f_h") rv=$(ratio "$f_v" "$f_r")
cat <<EOF
| (f) curated import, warm session vs host  | $(printf '%8s ms' "$(ms "$f_s")") | $(printf '%6s ms' "$(ms "$f_h")") | $(printf '%7sx of host' "$rf") | <= 1.05x $(verdict "$rf" 1.0500001 "<") |
| (f) session run vs venv + pip + import    | $(printf '%8s ms' "$(ms "$f_r")") | $(printf '%6s ms' "$(ms "$f_v")") | $(printf '%7sx faster ' "$rv") | (peer)          |
EOF
