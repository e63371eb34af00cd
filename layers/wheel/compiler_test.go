package wheel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

// compileGroup is the .py files of one wheel's site-packages.
type compileGroup struct {
	name  string
	files map[string]string // path relative to site-packages: source
}

func (g compileGroup) srcs() []string {
	var s []string
	for p := range g.files {
		s = append(s, p)
	}
	slices.Sort(s)
	return s
}

// traps are wheels whose .pyc bytes depend on what the compiling process did before:
// single-character strings that are not ASCII names are process-wide singletons, marked
// interned once anything interns them, and marshal writes that mark.
func traps() []compileGroup {
	filler := func(g compileGroup, n int) compileGroup {
		for i := range n {
			g.files[fmt.Sprintf("%s/m%02d.py", g.name, i)] = fmt.Sprintf("def f%d(x):\n    return x + %d\n", i, i)
		}
		return g
	}
	return []compileGroup{
		// After the process wrote JSON, the json encoder had interned these.
		filler(compileGroup{"braces", map[string]string{"braces/z.py": "B = ['{', '}', '[', ']', ' ', ',', ':']\n"}}, 2*chunkFiles),
		// An identifier interns a Latin-1 letter for every file compiled after it: in a
		// fresh process per wheel, z.py sees é interned by a.py, even from another chunk.
		filler(compileGroup{"letters", map[string]string{
			"letters/a.py": "é = 1\n",
			"letters/z.py": "E = 'é'\nF = 'ñ'\n",
		}}, 2*chunkFiles),
		// ... and in a fresh process, this one does not.
		{"letters2", map[string]string{"letters2/z.py": "E = 'é'\nG = ('é', 'ø')\n"}},
		// A coding cookie imports a codec module.
		{"cookie", map[string]string{"cookie/c.py": "# -*- coding: cp1252 -*-\nS = '\xe9'\nT = ('\xa7', '\xb6')\n"}},
		{"py2", map[string]string{"py2/old.py": "print 'x'\n", "py2/new.py": "X = {1, 2, 3}\n"}},
	}
}

// writeGroups writes every group under its own root in a new directory.
func writeGroups(t *testing.T, groups []compileGroup) string {
	t.Helper()
	dir := t.TempDir()
	for _, g := range groups {
		for p, src := range g.files {
			f := filepath.Join(dir, g.name, p)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// stdlibGroups are a few packages of interp's standard library, as wheels.
func stdlibGroups(t *testing.T, interp string) []compileGroup {
	t.Helper()
	stdlib := strings.TrimSpace(string(runPython(t, interp, nil, `import sysconfig; print(sysconfig.get_paths()["stdlib"])`)))
	var groups []compileGroup
	for _, pkg := range []string{"json", "email", "html", "http", "encodings"} {
		g := compileGroup{pkg, map[string]string{}}
		err := filepath.WalkDir(filepath.Join(stdlib, pkg), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".py") {
				return err
			}
			b, err := os.ReadFile(p)
			rel, _ := filepath.Rel(stdlib, p)
			g.files[filepath.ToSlash(rel)] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	return groups
}

type compiled struct {
	pycs, skipped []string
	bytes         map[string][]byte
}

func readCompiled(t *testing.T, site string, pycs, skipped []string) compiled {
	t.Helper()
	c := compiled{pycs: pycs, skipped: skipped, bytes: map[string][]byte{}}
	for _, p := range pycs {
		b, err := os.ReadFile(filepath.Join(site, strings.TrimPrefix(p, "site-packages/")))
		if err != nil {
			t.Fatal(err)
		}
		c.bytes[p] = b
	}
	return c
}

// TestCompilerMatchesFreshProcesses: a shared Compiler, wheels compiled at the same time
// on two processes or one after another on one, writes the bytes of one fresh process
// per wheel, and reports the same files compiled and skipped in the same order.
//
// It runs on every interpreter of compileInterpreters: CPython 3.13.0 failed the first
// compile of a file with a coding cookie once the process's working directory was gone
// (the "cookie" trap), which only that interpreter showed.
func TestCompilerMatchesFreshProcesses(t *testing.T) {
	for _, interp := range compileInterpreters(t) {
		name := filepath.Base(interp) // python3.11, or pyenv's version
		if v, ok := strings.CutPrefix(interp, "/root/.pyenv/versions/"); ok {
			name = "pyenv-" + strings.SplitN(v, "/", 2)[0]
		}
		t.Run(name, func(t *testing.T) {
			t.Logf("interpreter %s", interp)
			compilerMatchesFreshProcesses(t, interp)
		})
	}
}

func compilerMatchesFreshProcesses(t *testing.T, interp string) {
	ctx := context.Background()
	groups := append(traps(), stdlibGroups(t, interp)...)

	fresh := map[string]compiled{}
	dir := writeGroups(t, groups)
	for _, g := range groups {
		site := filepath.Join(dir, g.name)
		pycs, skipped, err := compileOnce(ctx, interp, site, DefaultSitePackagesDir, g.srcs())
		if err != nil {
			t.Fatal(err)
		}
		fresh[g.name] = readCompiled(t, site, pycs, skipped)
	}
	if got := fresh["py2"].skipped; !slices.Equal(got, []string{"py2/old.py"}) {
		t.Fatalf("skipped %v, want py2/old.py", got)
	}

	for _, procs := range []int{2, 1} {
		t.Run(fmt.Sprintf("procs=%d", procs), func(t *testing.T) {
			c, err := NewCompiler(ctx, interp, procs)
			if err != nil {
				t.Fatal(err)
			}
			dir := writeGroups(t, groups)
			got := make([]compiled, len(groups))
			var wg sync.WaitGroup
			for i, g := range groups {
				run := func() {
					site := filepath.Join(dir, g.name)
					pycs, skipped, err := c.compile(ctx, site, DefaultSitePackagesDir, g.srcs())
					if err != nil {
						t.Error(err)
						return
					}
					got[i] = readCompiled(t, site, pycs, skipped)
				}
				if procs == 1 {
					run() // in order: letters2 right after letters, on the same process
					continue
				}
				wg.Add(1)
				go func() { defer wg.Done(); run() }()
			}
			wg.Wait()
			if err := c.Close(); err != nil {
				t.Error(err)
			}
			for i, g := range groups {
				want := fresh[g.name]
				if !slices.Equal(got[i].pycs, want.pycs) || !slices.Equal(got[i].skipped, want.skipped) {
					t.Errorf("%s: compiled %v skipped %v, a fresh process %v %v", g.name, got[i].pycs, got[i].skipped, want.pycs, want.skipped)
				}
				for p, b := range want.bytes {
					if !bytes.Equal(got[i].bytes[p], b) {
						t.Errorf("%s: %s differs from a fresh process's", g.name, p)
					}
				}
			}
		})
	}
}

// TestCompilerFallsBackRarely: a wheel is compiled again in a fresh process only when
// its compile changed what a fresh process would see (a Latin-1 identifier), not for
// ordinary files, nor for the script's own answers.
func TestCompilerFallsBackRarely(t *testing.T) {
	interp := compileInterpreter(t)
	ctx := context.Background()
	c, err := NewCompiler(ctx, interp, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var letters compileGroup
	for _, g := range traps() {
		if g.name == "letters" {
			letters = g
		}
	}
	groups := append(stdlibGroups(t, interp), traps()[0], letters)
	dir := writeGroups(t, groups)
	for _, g := range groups {
		if _, _, err := c.compile(ctx, filepath.Join(dir, g.name), DefaultSitePackagesDir, g.srcs()); err != nil {
			t.Fatal(err)
		}
		want := int64(0)
		if g.name == "letters" {
			want = 1
		}
		if n := c.fresh.Swap(0); n != want {
			t.Errorf("%s: compiled again in a fresh process %d times, want %d", g.name, n, want)
		}
	}
	info, err := c.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(runPython(t, interp, nil, `import sys, importlib.util; print(sys.implementation.name, sys.implementation.cache_tag, importlib.util.MAGIC_NUMBER.hex())`)))
	if got := []string{info.Implementation, info.CacheTag, info.Magic}; !slices.Equal(got, want) || info.Major != 3 || info.Minor != 11 || !strings.HasPrefix(info.SysVersion, "3.11.") {
		t.Errorf("Describe = %+v, want %v and 3.11", info, want)
	}
}

// TestCompilerInstallsShareOne: Installs sharing a Compiler at the same time give the
// trees they give alone.
func TestCompilerInstallsShareOne(t *testing.T) {
	interp := compileInterpreter(t)
	var whls []string
	for i := range 4 {
		w := pycWheel()
		for j := range (i + 1) * chunkFiles {
			w.Files = append(w.Files, fixture.File{Path: fmt.Sprintf("py2files/gen%02d.py", j), Data: fmt.Appendf(nil, "V = {%d, %d, 'a', 'é'}\n", i, j)})
		}
		whls = append(whls, writeWheel(t, w))
	}
	c, err := NewCompiler(t.Context(), interp, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	shared := make([]string, len(whls))
	var wg sync.WaitGroup
	for i, whl := range whls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dest := filepath.Join(t.TempDir(), "tree")
			if _, err := Install(t.Context(), whl, dest, InstallOptions{Compiler: c}); err != nil {
				t.Error(err)
			}
			shared[i] = dest
		}()
	}
	wg.Wait()
	for i, whl := range whls {
		alone, _ := installT(t, whl, InstallOptions{Interpreter: interp})
		want, got := readTree(t, alone), readTree(t, shared[i])
		if !slices.Equal(keys(got), keys(want)) {
			t.Fatalf("%s: files %v, alone %v", whl, keys(got), keys(want))
		}
		for p, f := range want {
			if !bytes.Equal(got[p].data, f.data) {
				t.Errorf("%s: %s differs from an install alone", filepath.Base(whl), p)
			}
		}
	}
	if _, err := Install(t.Context(), whls[0], filepath.Join(t.TempDir(), "tree"), InstallOptions{Compiler: c, Interpreter: "/other/python3"}); err == nil {
		t.Error("a Compiler of one interpreter with Interpreter naming another: no error")
	}
}

// TestCompilerCanceled: a compile canceled while its requests run returns ctx's error
// and kills the processes they ran on; the Compiler starts others for the next compile,
// and Close ends every process.
func TestCompilerCanceled(t *testing.T) {
	interp := compileInterpreter(t)
	c, err := NewCompiler(t.Context(), interp, 2)
	if err != nil {
		t.Fatal(err)
	}
	g := compileGroup{"slow", map[string]string{}}
	for i := range 8 * chunkFiles {
		g.files[fmt.Sprintf("slow/m%02d.py", i)] = strings.Repeat("x = [1, 2, 3]\n", 5000)
	}
	dir := writeGroups(t, []compileGroup{g})
	site := filepath.Join(dir, "slow")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.compile(ctx, site, DefaultSitePackagesDir, g.srcs())
		done <- err
	}()
	for { // until the first .pyc is written: requests are running
		if m, _ := filepath.Glob(filepath.Join(site, "slow", "__pycache__", "*.pyc")); len(m) > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled compile: %v", err)
	}
	pycs, _, err := c.compile(t.Context(), site, DefaultSitePackagesDir, g.srcs())
	if err != nil || len(pycs) != len(g.files) {
		t.Fatalf("compile after a cancel: %d .pyc, %v", len(pycs), err)
	}
	c.mu.Lock()
	var live []*worker
	for w := range c.live {
		live = append(live, w)
	}
	c.mu.Unlock()
	if len(live) == 0 || len(live) > 2 {
		t.Errorf("%d processes live, want 1 or 2", len(live))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, w := range live {
		if w.cmd.ProcessState == nil {
			t.Errorf("process %d still running after Close", w.cmd.Process.Pid)
		}
	}
}

func TestCompilerShared(t *testing.T) {
	const rest = " cpython-3x a70d0d0a 332e31\n"
	for hello, want := range map[string]bool{
		"cpython 3 11" + rest: true, "cpython 3 13" + rest: true, "cpython 4 0" + rest: true,
		"cpython 3 10" + rest: false, "pypy 3 11" + rest: false, "cpython 3 11\n": false, "": false, "garbage\n": false,
		"cpython 3 11 cpython-311 a70d0d0a not-hex\n": false,
	} {
		if got := (&Compiler{}).shared([]byte(hello)); got != want {
			t.Errorf("shared(%q) = %v, want %v", hello, got, want)
		}
	}
}

// TestInstallCompilesWhileWriting: the .pyc are compiled while the rest of the wheel is
// written; a .pyc the wheel ships in __pycache__ is written before and replaced by the
// compiled one, as when compiling came last, every time.
func TestInstallCompilesWhileWriting(t *testing.T) {
	interp := compileInterpreter(t)
	w := fixture.Wheel{Name: "shipped", Version: "1.0", Files: []fixture.File{
		{Path: "shipped/__init__.py", Data: []byte("X = 1\n")},
		{Path: "shipped/__pycache__/__init__.cpython-311.pyc", Data: []byte("not a pyc")},
		{Path: "shipped/__pycache__/notes.txt", Data: []byte("kept\n")},
		{Path: "shipped/big.bin", Data: bytes.Repeat([]byte("0123456789abcdef"), 1<<16)},
	}}
	for i := range 40 {
		w.Files = append(w.Files, fixture.File{Path: fmt.Sprintf("shipped/m%02d.py", i), Data: fmt.Appendf(nil, "V = %d\n", i)})
	}
	whl := writeWheel(t, w)
	c, err := NewCompiler(t.Context(), interp, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var first map[string]treeFile
	for i := range 6 {
		opts := InstallOptions{Interpreter: interp}
		if i%2 == 1 {
			opts = InstallOptions{Compiler: c}
		}
		dest, inst := installT(t, whl, opts)
		tree := readTree(t, dest)
		pyc := tree["site-packages/shipped/__pycache__/__init__.cpython-311.pyc"]
		if string(pyc.data) == "not a pyc" || len(pyc.data) < 16 {
			t.Fatalf("install %d: the shipped .pyc was not replaced by a compiled one: %q", i, pyc.data)
		}
		if string(tree["site-packages/shipped/__pycache__/notes.txt"].data) != "kept\n" {
			t.Fatalf("install %d: __pycache__/notes.txt is not kept", i)
		}
		if first == nil {
			first = tree
			checkRecord(t, python3(t), dest, inst)
			continue
		}
		if !slices.Equal(keys(tree), keys(first)) {
			t.Fatalf("install %d: files %v, first %v", i, keys(tree), keys(first))
		}
		for p, f := range first {
			if !bytes.Equal(tree[p].data, f.data) {
				t.Errorf("install %d: %s differs", i, p)
			}
		}
	}
}

// TestCompilerPriority: a process that comes free goes to the waiting batch of highest
// priority, among equals to the first that came.
func TestCompilerPriority(t *testing.T) {
	c, err := NewCompiler(t.Context(), compileInterpreter(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.acquire(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	prios := []int64{1, 3, 2, 3}
	got := make(chan int, len(prios))
	for i, p := range prios {
		go func() {
			w, err := c.acquire(t.Context(), p)
			if err != nil {
				t.Error(err)
				got <- -1
				return
			}
			got <- i
			c.release(w)
		}()
		for { // until it waits, so that the order they came in is known
			c.mu.Lock()
			n := len(c.waiting)
			c.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	c.release(w)
	var order []int
	for range prios {
		order = append(order, <-got)
	}
	if want := []int{1, 3, 2, 0}; !slices.Equal(order, want) {
		t.Errorf("served %v, want %v (priorities %v)", order, want, prios)
	}
}
