//go:build linux

package sandbox

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// signalTree sends sig to every descendant of pid (and to pid itself when
// self), found through /proc. Processes that appear meanwhile are missed; the
// caller's final SIGKILL of bwrap takes down its whole pid namespace anyway.
func signalTree(pid int, sig syscall.Signal, self bool) {
	if self {
		_ = syscall.Kill(pid, sig)
	}
	for _, p := range descendants(pid) {
		_ = syscall.Kill(p, sig)
	}
}

// descendants returns the pids below pid in the process tree, parents first.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentOf(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// proc identifies a process across pid reuse.
type proc struct {
	pid   int
	start string // start time, field 22 of /proc/<pid>/stat
}

// snapshot returns the descendants of pid.
func snapshot(pid int) []proc {
	var out []proc
	for _, p := range descendants(pid) {
		if f := statFields(p); len(f) > 19 {
			out = append(out, proc{p, f[19]})
		}
	}
	return out
}

// waitGone waits up to limit until every process of ps has exited (a zombie
// counts as exited: it runs nothing and holds no mount).
func waitGone(ps []proc, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for _, p := range ps {
		for time.Now().Before(deadline) {
			f := statFields(p.pid)
			if len(f) <= 19 || f[19] != p.start || f[0] == "Z" || f[0] == "X" {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// statFields returns the fields of /proc/<p>/stat after the command name:
// f[0] is the state, f[1] the parent pid, f[19] the start time.
func statFields(p int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
	if err != nil {
		return nil
	}
	return parseStat(b)
}

// parseStat splits the contents of a /proc/<pid>/stat file after the command
// name, which is in parentheses and may itself contain spaces and ")".
func parseStat(b []byte) []string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// parentOf reads the parent pid from /proc/<p>/stat, whose second field (comm)
// may itself contain spaces and parentheses.
func parentOf(p int) (int, bool) {
	f := statFields(p)
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}
