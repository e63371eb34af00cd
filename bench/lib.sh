# bench/lib.sh: the shell functions the benchmarks share. A benchmark sources it from the
# repository root (`. bench/lib.sh`); it also kills and reaps, on exit, every background
# server whose pid the benchmark appends to pids, unmounts every directory it appends
# to mounts, and detaches every loop device it appends to loops.

die() { echo "bench/${0##*/}: $*" >&2; exit 1; }

pids=(); mounts=(); loops=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in "${mounts[@]}"; do umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true; done
  for p in "${loops[@]}"; do losetup -d "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) exit 1; print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# rmtree DIR: the host cache is read-only by design; make it writable, then remove it.
rmtree() { chmod -R u+w "$1" 2>/dev/null || true; rm -rf "$1"; }
# waitfile FILE WHAT: wait up to 10 s for a background server to write its first line.
waitfile() { for _ in $(seq 200); do [[ -s $1 ]] && return; sleep 0.05; done; die "$2 did not start; see ${1%.*}.log"; }
