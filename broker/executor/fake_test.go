package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/sandbox"
)

// fakeStore holds sessions and bindings; only what the Manager reads is implemented.
type fakeStore struct {
	broker.Store
	mu       sync.Mutex
	sessions map[string]broker.Session
	bindings map[string][]broker.Binding
	reads    int
}

func (f *fakeStore) GetSession(_ context.Context, id string) (broker.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	s, ok := f.sessions[id]
	if !ok {
		return s, fmt.Errorf("session %s: %w", id, broker.ErrNotFound)
	}
	return s, nil
}

func (f *fakeStore) Bindings(_ context.Context, id string) ([]broker.Binding, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]broker.Binding(nil), f.bindings[id]...), nil
}

func (f *fakeStore) bind(id, ref string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bindings[id] = append(f.bindings[id], broker.Binding{SessionID: id, Kind: lock.KindExt, Ref: ref})
}

// fakeClock is Options.Now, moved by the test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeKernel runs a tiny language: "set K V", "get K", "print TEXT", "layers", "wait"
// (tells entered, then waits for release or the end of ctx), "crash", "hang" (a cell
// that ignored its timeout's interrupt and was killed).
type fakeKernel struct {
	h       *harness
	n       int // the how-manieth start
	spec    sandbox.Spec
	state   map[string]string
	done    chan struct{}
	once    sync.Once
	pingErr error
}

func (k *fakeKernel) die() { k.once.Do(func() { close(k.done) }) }

func (k *fakeKernel) alive() bool {
	select {
	case <-k.done:
		return false
	default:
		return true
	}
}

func (k *fakeKernel) Exec(ctx context.Context, code string, timeout time.Duration, emit func(broker.ExecEvent)) (broker.ExecResult, string, error) {
	if !k.alive() {
		return broker.ExecResult{Status: broker.RunError}, "the process exited", nil
	}
	cmd, arg, _ := strings.Cut(code, " ")
	res := broker.ExecResult{Status: broker.RunOK}
	switch cmd {
	case "set":
		key, v, _ := strings.Cut(arg, " ")
		k.state[key] = v
	case "get":
		v, ok := k.state[arg]
		if !ok {
			res.Status = broker.RunError
			res.Error = &broker.ExecError{EName: "NameError", EValue: arg}
		}
		res.Stdout = v
	case "print":
		emit(broker.ExecEvent{Type: broker.EventStream, Name: "stdout", Text: arg})
		res.Stdout = arg
	case "layers":
		var roots []string
		for _, l := range k.spec.Layers {
			roots = append(roots, l.Root)
		}
		res.Stdout = strings.Join(roots, " ")
	case "wait":
		k.h.entered <- k
		select {
		case <-k.h.release:
		case <-ctx.Done():
			res.Status = broker.RunCancelled
		case <-k.done:
			return broker.ExecResult{Status: broker.RunError}, "killed", nil
		}
	case "crash":
		k.die()
		return broker.ExecResult{Status: broker.RunError}, "killed by SIGSEGV", nil
	case "hang":
		k.die()
		return broker.ExecResult{Status: broker.RunTimeout}, "killed after ignoring the interrupt", nil
	default:
		return res, "", fmt.Errorf("fake kernel: unknown code %q", code)
	}
	return res, "", nil
}

func (k *fakeKernel) Shell(ctx context.Context, command string, timeout time.Duration) (broker.ShellResult, string, error) {
	switch command {
	case "crash":
		k.die()
		return broker.ShellResult{Status: broker.RunError, ExitCode: -1}, "killed", nil
	case "wait": // as exec's: tells entered, waits for release or the end of ctx
		k.h.entered <- k
		select {
		case <-k.h.release:
		case <-ctx.Done():
			return broker.ShellResult{Status: broker.RunCancelled, ExitCode: -1}, "", nil
		}
	}
	return broker.ShellResult{Status: broker.RunOK, Stdout: command}, "", nil
}

func (k *fakeKernel) Ping(context.Context) error {
	k.h.mu.Lock()
	defer k.h.mu.Unlock()
	return k.pingErr
}

func (k *fakeKernel) Close() error          { k.die(); return nil }
func (k *fakeKernel) Done() <-chan struct{} { return k.done }
func (k *fakeKernel) PID() int              { return 1000 + k.n }

// harness is a Manager on fakes.
type harness struct {
	t       *testing.T
	m       *Manager
	store   *fakeStore
	clock   *fakeClock
	root    string
	entered chan *fakeKernel
	release chan struct{}

	mu       sync.Mutex
	started  []*fakeKernel
	startErr error
}

func newHarness(t *testing.T, edit func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		store:   &fakeStore{sessions: map[string]broker.Session{}, bindings: map[string][]broker.Binding{}},
		entered: make(chan *fakeKernel, 16), release: make(chan struct{}), root: t.TempDir()}
	o := Options{Sessions: h.store, Repo: "reg.example/team/pylayer", Root: h.root, Now: h.clock.Now, tick: -1,
		start: h.start, assemble: fakeAssemble,
		hostIdentity: func(context.Context, string) (sandbox.Identity, error) {
			return sandbox.Identity{UID: os.Geteuid(), GID: os.Getegid()}, nil
		}}
	if edit != nil {
		edit(&o)
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	t.Cleanup(func() { m.Close() })
	return h
}

func (h *harness) start(ctx context.Context, spec sandbox.Spec) (kernelProc, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.startErr != nil {
		return nil, h.startErr
	}
	k := &fakeKernel{h: h, n: len(h.started) + 1, spec: spec, state: map[string]string{}, done: make(chan struct{})}
	h.started = append(h.started, k)
	return k, nil
}

func (h *harness) starts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.started)
}

func (h *harness) kernel(i int) *fakeKernel {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started[i]
}

// session adds a session to the store.
func (h *harness) session(id string) broker.Session {
	s := broker.Session{ID: id, Owner: "alice", Interpreter: "sha256:" + strings.Repeat("1", 64), Base: "sha256:" + strings.Repeat("2", 64)}
	h.store.mu.Lock()
	h.store.sessions[id] = s
	h.store.mu.Unlock()
	return s
}

// exec runs code and fails the test on an error.
func (h *harness) exec(s broker.Session, code string, reset bool) broker.ExecResult {
	h.t.Helper()
	res, err := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: code, Reset: reset}, nil)
	if err != nil {
		h.t.Fatalf("exec %q: %v", code, err)
	}
	return res
}

// fakeAssemble holds nothing: each reference becomes a layer root named after its digest.
func fakeAssemble(_ context.Context, python string, layers []string) (*assemble.Env, error) {
	e := &assemble.Env{}
	if python != "" {
		e.Interpreter = &assemble.Layer{Ref: python, Root: "/fake/python", Kind: lock.KindPython}
	}
	for i, ref := range layers {
		kind := lock.KindExt
		if i == 0 {
			kind = lock.KindBase
		}
		_, d, _ := strings.Cut(ref, "@sha256:")
		if d == "" {
			return nil, errors.New("fake assemble: not by digest: " + ref)
		}
		e.Layers = append(e.Layers, &assemble.Layer{Ref: ref, Root: "/fake/" + d[:8], Kind: kind})
	}
	return e, nil
}
