package cache

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// The cross-process tests re-execute the test binary: TestHelperProcess does
// the child's part when PYLAYER_CACHE_HELPER is set, and nothing otherwise.
const helperEnv = "PYLAYER_CACHE_HELPER"

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	if err := helperMain(mode); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helperMain(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	par, _ := strconv.Atoi(os.Getenv("PYLAYER_CACHE_PARALLEL"))
	c, err := Open(os.Getenv("PYLAYER_CACHE_ROOT"), WithParallelism(max(par, 1)))
	if err != nil {
		return err
	}
	md := digest.Digest(os.Getenv("PYLAYER_CACHE_MANIFEST"))
	switch mode {
	case "hold":
		release, err := c.Hold(ctx, md)
		if err != nil {
			return err
		}
		fmt.Println("held")
		io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
		release()
		return nil
	case "install":
		if d, err := time.ParseDuration(os.Getenv("PYLAYER_CACHE_STEP_DELAY")); err == nil {
			testHook = func(string) { time.Sleep(d) }
		}
		readDelay, _ := time.ParseDuration(os.Getenv("PYLAYER_CACHE_READ_DELAY"))
		fx := os.Getenv("PYLAYER_CACHE_FIXTURE")
		manifest, err := os.ReadFile(filepath.Join(fx, "manifests", md.Encoded()))
		if err != nil {
			return err
		}
		root, err := c.Install(ctx, md, manifest, diskFetch(fx, os.Getenv("PYLAYER_CACHE_COUNTER"), readDelay), nil)
		if err != nil {
			return err
		}
		fmt.Println(root)
		return nil
	case "admit":
		// Admit md through reg.example/<prefix>-0, -1, ... until killed, printing each
		// index once its record is in place.
		for i := 0; ; i++ {
			a := Admission{Repository: fmt.Sprintf("reg.example/%s-%d", os.Getenv("PYLAYER_CACHE_PREFIX"), i), Rule: "*",
				Signers: []Signer{{KeyID: digest.FromString("k").String()}}}
			if err := c.Admit(ctx, md, a); err != nil {
				return err
			}
			fmt.Println(i)
		}
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

// diskFetch serves blobs from dir/blobs, appending each fetched digest to
// counter (O_APPEND: atomic across processes) and sleeping delay per 8 KiB.
func diskFetch(dir, counter string, delay time.Duration) Fetch {
	return func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
		if counter != "" {
			f, err := os.OpenFile(counter, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return nil, err
			}
			_, err = f.WriteString(d.Digest.Encoded() + "\n")
			f.Close()
			if err != nil {
				return nil, err
			}
		}
		f, err := os.Open(filepath.Join(dir, "blobs", d.Digest.Encoded()))
		if err != nil {
			return nil, err
		}
		return &slowReader{f: f, delay: delay}, nil
	}
}

type slowReader struct {
	f     *os.File
	delay time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.delay)
	return s.f.Read(p[:min(len(p), 8<<10)])
}

func (s *slowReader) Close() error { return s.f.Close() }

// writeFixtures stores fixtures for child processes under dir.
func writeFixtures(t *testing.T, dir string, fxs ...fixture) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "blobs"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "manifests"), 0o755))
	for _, fx := range fxs {
		must(t, os.WriteFile(filepath.Join(dir, "manifests", fx.md.Encoded()), fx.manifest, 0o644))
		for d, b := range fx.blobs {
			must(t, os.WriteFile(filepath.Join(dir, "blobs", d.Encoded()), b, 0o644))
		}
	}
}

func helperCmd(t *testing.T, mode, root, fxDir string, md digest.Digest, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "PYLAYER_CACHE_ROOT="+root,
		"PYLAYER_CACHE_FIXTURE="+fxDir, "PYLAYER_CACHE_MANIFEST="+string(md))
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// bigWheel is a wheel with incompressible content, so fetching takes a while.
func bigWheel(t *testing.T, name string, kib int) wheel {
	return wheel{name + "-1.0-py3-none-any.whl", map[string]string{
		"site-packages/" + name + "/__init__.py": "",
		"site-packages/" + name + "/blob.bin":    randomBytes(t, kib<<10),
		"site-packages/" + name + "/small.py":    name,
	}}
}

func TestConcurrentProcesses(t *testing.T) {
	w1, w2, w3, w4 := bigWheel(t, "w1", 200), bigWheel(t, "w2", 200), bigWheel(t, "w3", 200), bigWheel(t, "w4", 200)
	m1, m2 := artifact(t, "m1", w1, w2, w3), artifact(t, "m2", w2, w3, w4)
	fxDir, root := t.TempDir(), cacheRoot(t)
	writeFixtures(t, fxDir, m1, m2)
	counter := filepath.Join(t.TempDir(), "fetches")

	const n = 16
	cmds := make([]*exec.Cmd, n)
	outs := make([]*strings.Builder, n)
	for i := range cmds {
		md := m1.md
		if i%2 == 1 {
			md = m2.md
		}
		cmds[i] = helperCmd(t, "install", root, fxDir, md, "PYLAYER_CACHE_COUNTER="+counter,
			"PYLAYER_CACHE_READ_DELAY=1ms", "PYLAYER_CACHE_PARALLEL=4")
		outs[i] = &strings.Builder{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		must(t, cmds[i].Start())
	}
	roots := map[string]int{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %d: %v: %s", i, err, outs[i])
			continue
		}
		roots[strings.TrimSpace(outs[i].String())]++
	}
	if len(roots) != 2 {
		t.Errorf("roots = %v, want 2 distinct roots", roots)
	}
	b, err := os.ReadFile(counter)
	must(t, err)
	counts := map[string]int{}
	for _, line := range strings.Fields(string(b)) {
		counts[line]++
	}
	for _, fx := range []fixture{m1, m2} {
		for d := range fx.blobs {
			if counts[d.Encoded()] != 1 {
				t.Errorf("blob %s fetched %d times, want once", d, counts[d.Encoded()])
			}
		}
	}
	c, err := Open(root)
	must(t, err)
	if got := names(t, filepath.Join(root, "layers", "sha256")); len(got) != 2 {
		t.Errorf("layers = %v, want 2", got)
	}
	if got := names(t, filepath.Join(root, "tmp")); len(got) != 0 {
		t.Errorf("tmp = %v, want empty", got)
	}
	assertConsistent(t, c)
}

// TestKillAnywhere kills an installing process at random points: whatever is
// visible under trees/ and layers/ is complete, and the next Install succeeds.
func TestKillAnywhere(t *testing.T) {
	w1, w2, w3 := bigWheel(t, "w1", 96), bigWheel(t, "w2", 96), bigWheel(t, "w3", 96)
	fx := artifact(t, "m", w1, w2, w3)
	fxDir := t.TempDir()
	writeFixtures(t, fxDir, fx)
	ctx := context.Background()
	stages := map[string]int{}
	for i := range 20 {
		root := cacheRoot(t)
		cmd := helperCmd(t, "install", root, fxDir, fx.md,
			"PYLAYER_CACHE_READ_DELAY=1ms", "PYLAYER_CACHE_STEP_DELAY=8ms", "PYLAYER_CACHE_PARALLEL=2")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		must(t, cmd.Start())
		time.Sleep(time.Duration(rand.IntN(160)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if err == nil {
			stages["finished"]++
		} else if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("run %d: child failed on its own: %v: %s", i, err, out.String())
		}
		trees := names(t, filepath.Join(root, "trees", "sha256"))
		layers := names(t, filepath.Join(root, "layers", "sha256"))
		stages[fmt.Sprintf("%d tree entries, %d layers", len(trees), len(layers))]++

		c, err := Open(root)
		must(t, err)
		// A crash right after a rename leaves the top directory writable;
		// the next use (or doctor --repair) fixes that, content is complete.
		for _, d := range trees {
			fixTop(filepath.Join(root, "trees", "sha256", d))
		}
		for _, d := range layers {
			fixTop(filepath.Join(root, "layers", "sha256", d))
		}
		assertConsistent(t, c)
		s := newStore()
		s.add(fx)
		got, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
		if err != nil {
			t.Fatalf("run %d: install after kill: %v", i, err)
		}
		if want, _ := c.Layer(fx.md); got != want {
			t.Fatalf("run %d: root %q, want %q", i, got, want)
		}
		assertConsistent(t, c)
		c.cleanTmp(ctx, 0)
		if left := names(t, filepath.Join(root, "tmp")); len(left) != 0 {
			t.Errorf("run %d: tmp/ after cleanup: %v", i, left)
		}
		forceRemoveAll(root)
	}
	var keys []string
	for k, v := range stages {
		keys = append(keys, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(keys)
	t.Logf("states at kill time: %s", strings.Join(keys, "; "))
	if stages["finished"] > 10 {
		t.Errorf("%d of 20 children finished before the kill: the test no longer kills mid-install", stages["finished"])
	}
}

// TestHoldAcrossProcesses: a layer held by another process survives GC.
func TestHoldAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	root := cacheRoot(t)
	c, err := Open(root)
	must(t, err)
	s := newStore()
	fx := s.add(artifact(t, "k", wheelA))
	_, err = c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
	must(t, err)

	cmd := helperCmd(t, "hold", root, "", fx.md)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	entries, err := c.List(ctx)
	must(t, err)
	if len(entries) != 1 || !entries[0].Held {
		t.Errorf("List = %+v, want one held layer", entries)
	}
	rep, err := c.GC(ctx, 0, nil)
	must(t, err)
	if len(rep.RemovedLayers) != 0 || len(rep.Kept) != 1 {
		t.Errorf("GC while held: %+v", rep)
	}
	stdin.Close()
	must(t, cmd.Wait())
	rep, err = c.GC(ctx, 0, nil)
	must(t, err)
	if len(rep.RemovedLayers) != 1 || len(rep.RemovedTrees) != 1 {
		t.Errorf("GC after release: %+v", rep)
	}
	assertNothingLeft(t, c)
}
