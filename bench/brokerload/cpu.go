package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuGroups are named sets of processes whose CPU time a burst reports: -cpu
// replicas=PID+PID,postgres=PID. A process counts with its children (PostgreSQL's
// backends are the postmaster's) and every thread, from /proc/PID/task/*/schedstat, whose
// first field is the nanoseconds on a CPU: finer than the 10 ms ticks of /proc/PID/stat,
// which a burst of a few hundred milliseconds needs.
type cpuGroups []cpuGroup

type cpuGroup struct {
	name string
	pids []int
}

func parseCPUGroups(s string) (cpuGroups, error) {
	var gs cpuGroups
	if s == "" {
		return nil, nil
	}
	for _, g := range strings.Split(s, ",") {
		name, list, ok := strings.Cut(g, "=")
		if !ok || name == "" || list == "" {
			return nil, fmt.Errorf("-cpu %q: want NAME=PID[+PID...], comma-separated", s)
		}
		cg := cpuGroup{name: name}
		for _, p := range strings.Split(list, "+") {
			pid, err := strconv.Atoi(p)
			if err != nil || pid <= 0 {
				return nil, fmt.Errorf("-cpu %q: %q is not a process ID", s, p)
			}
			cg.pids = append(cg.pids, pid)
		}
		gs = append(gs, cg)
	}
	return gs, nil
}

// sample returns each group's CPU time so far, and this process's last.
func (gs cpuGroups) sample() []time.Duration {
	out := make([]time.Duration, 0, len(gs)+1)
	for _, g := range gs {
		var d time.Duration
		for _, p := range g.pids {
			d += treeCPU(p)
		}
		out = append(out, d)
	}
	return append(out, treeCPU(os.Getpid()))
}

// report formats the CPU time between two samples.
func (gs cpuGroups) report(a, b []time.Duration) string {
	var parts []string
	for i, g := range gs {
		parts = append(parts, fmt.Sprintf("%s %s", g.name, (b[i]-a[i]).Round(time.Millisecond)))
	}
	n := len(gs)
	return strings.Join(append(parts, fmt.Sprintf("brokerload %s", (b[n]-a[n]).Round(time.Millisecond))), ", ")
}

// treeCPU is the CPU time of pid's threads and of its children's.
func treeCPU(pid int) time.Duration {
	d := threadsCPU(pid)
	lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid)) // each thread's own
	for _, l := range lists {
		kids, _ := os.ReadFile(l)
		for _, k := range strings.Fields(string(kids)) {
			if c, err := strconv.Atoi(k); err == nil {
				d += threadsCPU(c)
			}
		}
	}
	return d
}

func threadsCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var d time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				d += time.Duration(ns)
			}
		}
	}
	return d
}

// startProfiles starts a one-second CPU profile on each ADDR=FILE (a replica's loopback
// debug server, which takes profiles of whole seconds), as the agents start, and returns
// the function that waits for them and reports how writing them went.
func startProfiles(ctx context.Context, specs []string) (func() error, error) {
	if len(specs) == 0 {
		return func() error { return nil }, nil
	}
	errs := make(chan error, len(specs))
	for _, sp := range specs {
		addr, file, ok := strings.Cut(sp, "=")
		if !ok || !loopbackAddr(addr) || file == "" {
			return nil, fmt.Errorf("-profile %q: want 127.0.0.1:PORT=FILE", sp)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/profile?seconds=1", nil)
		if err != nil {
			return nil, err
		}
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- fmt.Errorf("profile of %s: %w", addr, err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("profile of %s: %s", addr, resp.Status)
				return
			}
			f, err := os.Create(file)
			if err == nil {
				_, err = io.Copy(f, resp.Body)
				err = errors.Join(err, f.Close())
			}
			errs <- err
		}()
	}
	return func() error {
		var all []error
		for range specs {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}, nil
}

func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopback(host)
}
