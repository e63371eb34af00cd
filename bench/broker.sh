#!/usr/bin/env bash
# Broker benchmark: `pylayer serve` on loopback (oci: layout repository, local index, a
# catalog that allowlists foo) in three setups, sqlite1, postgres1 and postgres2 (two
# replicas on one database, agents spread over them), each on a fresh store and a fresh
# copy of the repository: N sessions, then N agents at once, each polling its env POLLS
# times, asking for foo (every DISTINCT-th agent for foo==2.0, the rest for foo==1.0: most
# requests bind an existing layer without a build) and long-polling the request until it
# is bound. bench/brokerload runs the same burst against a trivial Go handler (the floor)
# first, in the same run, and prints p50/p99 of GET env, POST requests and
# request-to-bound with their ratios to the floor. Last, BIG agents across two replicas on
# PostgreSQL. Every setup must end with every request bound and each distinct layer
# pushed once (its tags in the repository, the replicas' "layer pushed" log lines).
# PostgreSQL is Debian's server, initdb'd into a temporary directory (as the postgres user
# when run as root) on 127.0.0.1 with fsync on, and stopped on exit. See bench/README.md.
#
#   make build && bash bench/broker.sh           # N=200 BIG=1000 POLLS=3 DISTINCT=10 JOBS=2 ROUNDS=3
#   CASES=sqlite1 BIG=0 bash bench/broker.sh     # SQLite only, no big run
#   PROFILE=1 CASES=postgres1 BIG=0 bash bench/broker.sh
#   SYNC=1 bash bench/broker.sh                  # agents ask without Prefer: respond-async
#
# Agents long-poll their requests until bound, so they ask preferring an asynchronous
# answer (Prefer: respond-async): the POST is answered before its classification, which
# the first of a crowd would otherwise make the rest wait for. SYNC=1 measures clients
# that want the decision in the POST's answer instead.
#
# PROFILE=1 measures where the time goes, into $work/LABEL/profile/: each replica serves
# profiles on a loopback --debug-addr (hidden flag), brokerload takes a one-second CPU
# profile of each from the agents' start (not the sessions' setup), the script the block
# and mutex profiles and the connection pool's statistics after it; PostgreSQL runs with pg_stat_statements (reset after the replicas start, so
# it counts the burst and the sessions' setup only), and the transaction count is printed.
# Every run prints the CPU time of the replicas, of PostgreSQL (its backends) and of
# brokerload during the agents' burst, and of the floor and brokerload during the floor's.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

N=${N:-200}
BIG=${BIG:-1000}
POLLS=${POLLS:-3}
DISTINCT=${DISTINCT:-10}
JOBS=${JOBS:-2}
CASES=${CASES:-sqlite1 postgres1 postgres2}
ROUNDS=${ROUNDS:-3}               # runs of each setup; the verdicts are on their medians
PYLAYER=${PYLAYER:-bin/pylayer}   # the binary under test
PROFILE=${PROFILE:-}

for v in N BIG POLLS DISTINCT JOBS ROUNDS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v=${!v@Q}: want a non-negative integer"
done
(( N >= 1 && DISTINCT >= 1 && JOBS >= 1 && ROUNDS >= 1 )) || die "N, DISTINCT, JOBS and ROUNDS must be at least 1"
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
specs=()
for ((i = 1; i < DISTINCT; i++)); do specs+=("foo==1.0"); done
specs+=("foo==2.0")
distinct=$(printf '%s\n' "${specs[@]}" | sort -u | wc -l)

"$work/brokerload" -serve-floor >"$work/floor.url" 2>"$work/floor.log" &
pids+=($!)
floor_pid=$!
waitfile "$work/floor.url" "brokerload -serve-floor"
floor=$(head -n1 "$work/floor.url")

# PostgreSQL, started when a setup first needs it; a fresh database for each setup.
pg_bin= pg_dir= pg_port=
trap 'cleanup; [[ -z $pg_dir ]] || rm -rf "$pg_dir"' EXIT
pg_start() {
  [[ -n $pg_port ]] && return
  local as=()
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  [[ -n $pg_bin && -x $pg_bin/initdb ]] || die "no PostgreSQL server in /usr/lib/postgresql/*/bin: run 'make deps' (Debian's postgresql)"
  pg_dir=$(mktemp -d /tmp/pylayer-bench-pg.XXXXXX)
  if (( EUID == 0 )); then chown postgres: "$pg_dir"; as=(setpriv --reuid=postgres --regid=postgres --clear-groups --); fi
  "${as[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$work/initdb.log" 2>&1 ||
    { cat "$work/initdb.log" >&2; die "initdb failed"; }
  pg_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local stats=()
  [[ -z $PROFILE ]] || stats=(-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all)
  "${as[@]}" "$pg_bin/postgres" -D "$pg_dir/data" -h 127.0.0.1 -p "$pg_port" -k "$pg_dir" \
    -c max_connections=200 -c shared_buffers=64MB "${stats[@]}" >"$work/postgres.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && return; sleep 0.05; done
  die "postgres did not start; see $work/postgres.log"
}
pg_newdb() { # pg_newdb NAME: creates the empty database NAME and prints its URL
  "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres "$1" >&2 || die "createdb $1 failed"
  echo "postgres://postgres@127.0.0.1:$pg_port/$1?sslmode=disable"
}

# freeport: a free TCP port on 127.0.0.1.
freeport() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
psql_db() { "$pg_bin/psql" -X -q -At -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -c "$2"; }

summaries=()
# bench_case LABEL STORE REPLICAS AGENTS: a fresh store and copy of the repository,
# REPLICAS serve processes on them (each with its own cache), the burst after its floor,
# then the counts.
bench_case() {
  local label=$1 store=$2 replicas=$3 agents=$4 d="$work/$1" db owner k urls=() spids=() dbgs=() dbg=()
  mkdir -p "$d"
  cp -a "$work/repo" "$d/repo"
  case $store in
    sqlite) db="$d/broker.db" ;;
    postgres) pg_start; db=$(pg_newdb "bench_${label//-/_}") ;;
  esac
  owner=$("$PYLAYER" token create --db "$db" --role owner --subject bench)
  for ((k = 1; k <= replicas; k++)); do
    cp -a "$work/cache" "$d/cache$k"
    if [[ -n $PROFILE ]]; then dbgs+=("127.0.0.1:$(freeport)"); dbg=(--debug-addr "${dbgs[-1]}"); fi
    "$PYLAYER" --cache "$d/cache$k" serve "${dbg[@]}" --listen 127.0.0.1:0 --db "$db" --data "$d/uploads$k" --catalog "$work/catalog.json" \
      --repo "oci:$PWD/$d/repo" --key "$work/cosign.key" --index-url "$url" --jobs "$JOBS" >"$d/serve$k.url" 2>"$d/serve$k.log" &
    spids+=($!)
    pids+=($!)
    waitfile "$d/serve$k.url" "pylayer serve ($label, replica $k)"
    urls+=("$(head -n1 "$d/serve$k.url")")
  done
  echo "running $agents agents: $label ($store, $replicas replica(s)) ..." >&2
  local prof="$d/profile" profs=() pm=
  [[ $store == postgres ]] && pm=$(head -n1 "$pg_dir/data/postmaster.pid")
  if [[ -n $PROFILE ]]; then
    mkdir -p "$prof"
    if [[ $store == postgres ]]; then
      psql_db "bench_${label//-/_}" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset(); SELECT pg_stat_reset();" >/dev/null
    fi
    for k in "${!dbgs[@]}"; do profs+=("${dbgs[$k]}=$prof/cpu$((k + 1)).pprof"); done
  fi
  local cpu="replicas=$(IFS=+; echo "${spids[*]}")"
  [[ -z $pm ]] || cpu+=",postgres=$pm"
  "$work/brokerload" -url "$(IFS=,; echo "${urls[*]}")" -floor "$floor" -token "$owner" -label "$label" \
    -cpu "$cpu" -floor-cpu "floor=$floor_pid" ${profs:+-profile "$(IFS=,; echo "${profs[*]}")"} \
    -n "$agents" -polls "$POLLS" -specs "$(IFS=,; echo "${specs[*]}")" ${SYNC:+-sync} | tee "$d/load.txt"
  if [[ -n $PROFILE ]]; then
    for k in "${!dbgs[@]}"; do
      curl -s -o "$prof/block$((k + 1)).pprof" "http://${dbgs[$k]}/debug/pprof/block"
      curl -s -o "$prof/mutex$((k + 1)).pprof" "http://${dbgs[$k]}/debug/pprof/mutex"
      echo "$label replica $((k + 1)) pool: $(curl -s "http://${dbgs[$k]}/debug/pool" | tr -d ' \n')"
    done
    if [[ $store == postgres ]]; then
      local dbn="bench_${label//-/_}"
      echo "$label transactions: $(psql_db "$dbn" "SELECT 'commits ' || xact_commit || ', rollbacks ' || xact_rollback FROM pg_stat_database WHERE datname = current_database()")"
      psql_db "$dbn" "SELECT calls, round(total_exec_time::numeric, 1) AS ms, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 110)
        FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        ORDER BY calls DESC LIMIT 40" | tee "$prof/statements.txt"
    fi
  fi
  for k in "${spids[@]}"; do kill "$k"; wait "$k" 2>/dev/null || true; done
  # Distinct specs over one base: that many ext layers, each built and pushed once.
  local exts pushed
  exts=$(grep -o '"org.opencontainers.image.ref.name": *"ext-[0-9a-f]*"' "$d/repo/index.json" | sort -u | wc -l)
  pushed=$(cat "$d"/serve*.log | grep -c 'msg="layer pushed"' || true)
  echo "$label: ext layers in the repository $exts, layers pushed $pushed (distinct specs: $distinct)"
  (( exts == distinct && pushed == distinct )) || die "$label: $exts ext tags and $pushed pushes, want $distinct of each"
  summaries+=("$(grep '^summary ' "$d/load.txt" | sed 's/^summary //')")
  echo >&2
}

for c in $CASES; do
  case $c in
    sqlite1 | postgres1 | postgres2) ;;
    *) die "CASES: unknown setup ${c@Q} (sqlite1, postgres1 or postgres2)" ;;
  esac
done
# Each setup ROUNDS times, each round a fresh store, its own floor burst just before it.
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CASES; do
    label=$c; (( ROUNDS == 1 )) || label=$c-r$r
    case $c in
      sqlite1) bench_case "$label" sqlite 1 "$N" ;;
      postgres1) bench_case "$label" postgres 1 "$N" ;;
      postgres2) bench_case "$label" postgres 2 "$N" ;;
    esac
  done
done
(( BIG == 0 )) || bench_case "postgres2-$BIG" postgres 2 "$BIG"

echo
echo "summary: p50, p99 (p99 over the floor's p99 in the same run); targets GET env 2x, POST requests 3x, request-to-bound 5x"
printf '%s\n' "${summaries[@]}"
# The floor is a burst on the same two cores and itself varies run to run by 2x or
# more, so each verdict is on the median of the setup's rounds' ratios.
echo
echo "median over $ROUNDS round(s) of the p99 ratios to the floor (each round against its own floor):"
printf '%s\n' "${summaries[@]}" | python3 -c '
import re, sys, statistics
rows = {}
for line in sys.stdin:
    label = line.split(" | ")[0].strip()
    case = re.sub(r"-r[0-9]+$", "", label)
    rows.setdefault(case, []).append([float(x) for x in re.findall(r"\(([0-9.]+)x floor", line)])
for case, rs in rows.items():
    out = []
    for i, (name, target) in enumerate([("GET env", 2), ("POST requests", 3), ("request-to-bound", 5)]):
        m = statistics.median(r[i] for r in rs)
        each = " ".join("%.2f" % r[i] for r in rs)
        out.append("%s %.2fx (target %dx %s; rounds %s)" % (name, m, target, "ok" if m <= target else "MISSED", each))
    print(case + " | " + " | ".join(out))
'
