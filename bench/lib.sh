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
# median: of numbers, one a line. Of an even count, the mean of the middle two, printed as an
# integer when both are (awk's print would write 1191035.5 as 1.19104e+06, which neither bc nor
# bash reads: RUNS=2 broke bench/layers.sh), with %.0f: mawk's %d stops at 2^31 - 1, and
# 2147483647 ns is 2.1 s (bench/run.sh's (c) showed pip at 2147.5 ms whatever it took).
median() {
  sort -n | awk '{ a[NR] = $1 } END {
    if (NR == 0) exit 1
    if (NR % 2) { print a[(NR + 1) / 2]; exit }
    x = a[NR / 2]; y = a[NR / 2 + 1]
    if (x ~ /^-?[0-9]+$/ && y ~ /^-?[0-9]+$/) printf "%.0f\n", int((x + y) / 2); else printf "%.6f\n", (x + y) / 2
  }'
}
# rmtree DIR: the host cache is read-only by design; make it writable, then remove it.
rmtree() { chmod -R u+w "$1" 2>/dev/null || true; rm -rf "$1"; }
# waitfile FILE WHAT: wait up to 10 s for a background server to write its first line.
waitfile() { for _ in $(seq 200); do [[ -s $1 ]] && return; sleep 0.05; done; die "$2 did not start; see ${1%.*}.log"; }

# benchfs WORK: where a benchmark writes its trees, per FS (bench/README.md says why): fresh,
# the default as root, is a new ext4 (mkfs defaults, journal on) mounted at WORK/fs for this
# run, from a sparse image WORK/fs.img on a loop device with direct I/O (so that the host does
# not write its pages back in the middle of a later run), unmounted and detached on exit; host
# is WORK itself. Sets fs (the directory) and fs_desc (for the summary), and marks fs an ext4
# "top" directory (chattr +T), whose subdirectories the allocator spreads over its groups.
benchfs() {
  FS=${FS:-fresh}
  [[ $FS == fresh || $FS == host ]] || die "FS=${FS@Q}: want fresh or host"
  if [[ $FS == fresh && $(id -u) != 0 ]]; then
    echo "not root: FS=host (a fresh file system needs mount)" >&2; FS=host
  fi
  fs=$1
  if [[ $FS == fresh ]]; then
    command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 is missing: apt-get install -y e2fsprogs (or FS=host)"
    fs=$1/fs; mkdir -p "$fs"
    truncate -s 24G "$1/fs.img" # sparse: the pull bench writes about 5 GB a run
    mkfs.ext4 -q -F "$1/fs.img" || die "mkfs.ext4 of $1/fs.img failed"
    local dev
    dev=$(losetup --direct-io=on --find --show "$1/fs.img") || die "no loop device for $1/fs.img (FS=host measures on $1 itself)"
    loops+=("$dev")
    mount "$dev" "$fs" || die "could not mount $dev (FS=host measures on $1 itself)"
    mounts+=("$fs")
    fs_desc="a fresh ext4 (loop-mounted, journal on)"
  else
    fs_desc="$(findmnt -no FSTYPE -T "$1" 2>/dev/null || stat -f -c %T "$1") at $1 (the host's)"
  fi
  chattr +T "$fs" 2>/dev/null || true
}
