package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/sandbox"
)

// Defaults of Options.
const (
	DefaultIdleTimeout = 5 * time.Minute
	DefaultMaxLive     = 8
	DefaultHealthEvery = 30 * time.Second
	DefaultMaxFile     = 64 << 20
	DefaultMaxOutput   = 1 << 20
)

// keepRuns is how many finished runs of a session Runs remembers.
const keepRuns = 50

// ForgetAfter is how long the record of a session with no process (its kept runs, why
// its last process went away) outlives its last call: then it is dropped, so that a
// host serving sessions for months keeps records of the recent ones only. The
// session's next call starts it afresh (its workspace stays).
const ForgetAfter = 24 * time.Hour

// pingTimeout bounds one health check.
const pingTimeout = 5 * time.Second

// Options configure a Manager. Sessions, Root and (for real sessions) Bwrap are required.
type Options struct {
	// Sessions is read on every call, the session and its bindings: the broker's Store
	// on its own host, broker.GrantedSessions on a sandbox host of a remote broker.
	Sessions broker.SessionSource
	Repo     string           // repository of the sessions' interpreter and base digests
	Assembly assemble.Options // how layers reach the host cache, as pylayer run has them
	Bwrap    string           // the bwrap binary (sandbox.FindBwrap)
	User     string           // host user of root's sessions (sandbox.RunOptions.User)
	Limits   sandbox.Limits   // of every session process, as pylayer run's flags give them
	// Root holds the sessions' workspaces, <Root>/<session id>, kept across restarts and
	// evictions, and their caches under <Root>/.cache/. It is created if missing.
	Root        string
	IdleTimeout time.Duration // a process idle this long is stopped (DefaultIdleTimeout)
	MaxLive     int           // processes at once on this host (DefaultMaxLive)
	HealthEvery time.Duration // idle processes are pinged this often (DefaultHealthEvery)
	MaxFile     int64         // largest workspace file PutFile writes (DefaultMaxFile)
	MaxOutput   int64         // per stream per call (DefaultMaxOutput)
	Logger      *slog.Logger  // default: discard
	Now         func() time.Time

	// Seams, for tests: how a process starts, how layers are assembled, who sessions
	// run as, and how often the background sweep runs (< 0: never; tests call sweep).
	start        func(ctx context.Context, spec sandbox.Spec) (kernelProc, error)
	assemble     func(ctx context.Context, python string, layers []string) (*assemble.Env, error)
	hostIdentity func(ctx context.Context, user string) (sandbox.Identity, error)
	tick         time.Duration
}

// kernelProc is one running session process: a sandbox/kernel Kernel behind an adapter
// (kernel.go), a fake in tests. Its results are already the broker's; dead is "" while
// the process lives, else why it is gone.
type kernelProc interface {
	Exec(ctx context.Context, code string, timeout time.Duration, emit func(broker.ExecEvent)) (res broker.ExecResult, dead string, err error)
	Shell(ctx context.Context, command string, timeout time.Duration) (res broker.ShellResult, dead string, err error)
	Ping(ctx context.Context) error
	Close() error
	Done() <-chan struct{}
	PID() int
}

// Manager runs one warm interpreter process per session, in the session's sandbox, for
// the broker's executor routes. It is safe for concurrent use.
type Manager struct {
	o Options

	mu       sync.Mutex
	sessions map[string]*session
	live     int                   // processes running or starting
	active   map[string]*activeRun // runs under way, by run id
	owner    map[string]string     // session of every run kept in a session's runs
	closed   bool
	calls    sync.WaitGroup // calls under way, for Close

	stop  chan struct{}
	swept sync.WaitGroup

	identMu sync.Mutex
	ident   *sandbox.Identity
	chown   bool // files the manager makes are handed to ident
}

var _ broker.Executor = (*Manager)(nil)

// session is one session's process and history. cur changes only under both op and
// Manager.mu; the other fields are Manager.mu's.
type session struct {
	id string
	op sync.Mutex // held by whoever uses or replaces cur: a call, a health check, an eviction

	busy     bool // a call holds (or waits for) op
	cur      *proc
	lastUsed time.Time
	lastPing time.Time
	lost     string // why the last process went away, told by the call that starts the next
	crashes  int    // calls in a row whose process crashed
	stuck    bool   // two crashes in a row: no process until a call with reset
	runs     []broker.RunInfo
}

// proc is a running process with the layers it holds.
type proc struct {
	k       kernelProc
	env     *assemble.Env
	spec    sandbox.Spec
	binds   binding
	started time.Time
}

// activeRun is a run under way: Runs lists it (RunRunning), Cancel ends it.
type activeRun struct {
	info   broker.RunInfo
	cancel context.CancelFunc
}

// New returns a Manager; Close stops its processes.
func New(o Options) (*Manager, error) {
	if o.Sessions == nil {
		return nil, errors.New("executor: Options.Sessions is required: the broker's Store, or broker.GrantedSessions on a sandbox host")
	}
	if o.Root == "" {
		return nil, errors.New("executor: Options.Root is required: the directory of the sessions' workspaces (--sessions-dir)")
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, fmt.Errorf("executor: --sessions-dir: %w", err)
	}
	o.Root = root
	switch {
	case o.IdleTimeout < 0, o.HealthEvery < 0, o.MaxLive < 0, o.MaxFile < 0, o.MaxOutput < 0:
		return nil, errors.New("executor: negative idle timeout, health interval, cap or size")
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxLive == 0 {
		o.MaxLive = DefaultMaxLive
	}
	if o.HealthEvery == 0 {
		o.HealthEvery = DefaultHealthEvery
	}
	if o.MaxFile == 0 {
		o.MaxFile = DefaultMaxFile
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.start == nil {
		if o.Bwrap == "" {
			return nil, errors.New("executor: Options.Bwrap is required (sandbox.FindBwrap)")
		}
		o.start = kernelStarter(o.Bwrap, o.User, o.MaxOutput)
	}
	if o.assemble == nil {
		ao := o.Assembly
		o.assemble = func(ctx context.Context, python string, layers []string) (*assemble.Env, error) {
			return assemble.Assemble(ctx, ao, python, layers)
		}
	}
	if o.hostIdentity == nil {
		o.hostIdentity = sandbox.HostIdentity
	}
	if o.tick == 0 {
		o.tick = max(min(o.HealthEvery/2, o.IdleTimeout/4, 5*time.Second), 10*time.Millisecond)
	}
	// 0711: the sandbox user reaches its workspace, and lists no one's.
	if err := os.MkdirAll(filepath.Join(o.Root, cacheDir), 0o711); err != nil {
		return nil, fmt.Errorf("executor: creating --sessions-dir: %w", err)
	}
	m := &Manager{o: o, sessions: map[string]*session{}, active: map[string]*activeRun{},
		owner: map[string]string{}, stop: make(chan struct{})}
	if o.tick > 0 {
		m.swept.Add(1)
		go m.sweeper()
	}
	return m, nil
}

// Close stops every process (a call under way ends with its process gone) and waits
// for the calls to return. Calls after Close are ErrUnavailable.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	for _, a := range m.active {
		a.cancel()
	}
	var ks []kernelProc
	for _, s := range m.sessions {
		if s.cur != nil {
			ks = append(ks, s.cur.k)
		}
	}
	m.mu.Unlock()
	close(m.stop)
	for _, k := range ks {
		k.Close()
	}
	m.swept.Wait()
	m.calls.Wait()
	m.mu.Lock()
	var ps []*proc
	for _, s := range m.sessions {
		if s.cur != nil {
			ps = append(ps, s.cur)
			s.cur = nil
			m.live--
		}
	}
	m.mu.Unlock()
	for _, p := range ps {
		p.k.Close()
		p.env.Release()
	}
	m.o.Logger.Info("session processes stopped", "count", len(ks))
	return nil
}

// sessionLocked returns the record of id, made on first use. m.mu is held.
func (m *Manager) sessionLocked(id string) *session {
	s := m.sessions[id]
	if s == nil {
		s = &session{id: id}
		m.sessions[id] = s
	}
	return s
}

// exited reports whether p's process is gone.
func exited(p *proc) bool {
	select {
	case <-p.k.Done():
		return true
	default:
		return false
	}
}

// detachLocked takes s's process away from it, with why; the caller holds s.op and
// m.mu, and stops p (stopProc) after letting go of m.mu.
func (m *Manager) detachLocked(s *session, why string) *proc {
	p := s.cur
	if p != nil {
		s.cur = nil
		s.lost = why
		m.live--
	}
	return p
}

// stopProc kills p's process and releases its layers.
func (m *Manager) stopProc(s *session, p *proc, why string) {
	if p == nil {
		return
	}
	p.k.Close()
	p.env.Release()
	m.o.Logger.Info("session process stopped", "session", s.id, "pid", p.k.PID(), "reason", why,
		"lived", m.o.Now().Sub(p.started).Round(time.Millisecond).String())
}

// sweeper runs sweep until Close.
func (m *Manager) sweeper() {
	defer m.swept.Done()
	t := time.NewTicker(m.o.tick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.sweep(context.Background())
		}
	}
}

// sweep stops the processes that have been idle IdleTimeout or have exited, pings
// those not checked for HealthEvery, dropping one that does not answer (the next call
// starts another), and forgets the sessions without a process unused for ForgetAfter.
func (m *Manager) sweep(ctx context.Context) {
	now := m.o.Now()
	type stopped struct {
		s   *session
		p   *proc
		why string
	}
	var stops []stopped
	var pings []*session
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	for id, s := range m.sessions {
		if !s.busy && s.cur == nil && now.Sub(s.lastUsed) >= ForgetAfter {
			// Nothing holds it: a call would have marked it busy under m.mu, and only a
			// session with a process is health-checked or evicted.
			for _, r := range s.runs {
				delete(m.owner, r.RunID)
			}
			delete(m.sessions, id)
			continue
		}
		if s.busy || s.cur == nil || !s.op.TryLock() {
			continue
		}
		var why string
		switch {
		case exited(s.cur):
			why = "the process exited while idle"
		case now.Sub(s.lastUsed) >= m.o.IdleTimeout:
			why = fmt.Sprintf("the process was stopped after %s idle", m.o.IdleTimeout)
		case now.Sub(s.lastPing) >= m.o.HealthEvery:
			pings = append(pings, s) // keeps op
			continue
		default:
			s.op.Unlock()
			continue
		}
		stops = append(stops, stopped{s, m.detachLocked(s, why), why})
		s.op.Unlock()
	}
	m.mu.Unlock()
	for _, st := range stops {
		m.stopProc(st.s, st.p, st.why)
	}
	for _, s := range pings {
		m.ping(ctx, s, now)
	}
}

// ping checks s's process; s.op is held and released here.
func (m *Manager) ping(ctx context.Context, s *session, now time.Time) {
	defer s.op.Unlock()
	p := s.cur // stable: op is held
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err := p.k.Ping(ctx)
	cancel()
	m.mu.Lock()
	s.lastPing = now
	var gone *proc
	const why = "the process stopped answering health checks"
	if err != nil {
		gone = m.detachLocked(s, why)
	}
	m.mu.Unlock()
	if gone != nil {
		m.o.Logger.Warn("session process failed its health check", "session", s.id, "err", err)
		m.stopProc(s, gone, why)
	}
}

// slot reserves one of the host's MaxLive processes for a process of self, stopping
// the longest-idle process of another session when all are taken; ErrUnavailable when
// every one is busy.
func (m *Manager) slot(self *session) error {
	var stops []*session
	var procs []*proc
	m.mu.Lock()
	if m.live >= m.o.MaxLive && !m.closed {
		var idle []*session
		for _, s := range m.sessions {
			if s != self && !s.busy && s.cur != nil {
				idle = append(idle, s)
			}
		}
		slices.SortFunc(idle, func(a, b *session) int { return a.lastUsed.Compare(b.lastUsed) })
		why := fmt.Sprintf("the process was stopped to make room for another session (this host runs at most %d)", m.o.MaxLive)
		for _, victim := range idle {
			if m.live < m.o.MaxLive {
				break
			}
			if !victim.op.TryLock() { // being health-checked
				continue
			}
			procs = append(procs, m.detachLocked(victim, why))
			stops = append(stops, victim)
			victim.op.Unlock()
		}
	}
	full, closed := m.live >= m.o.MaxLive, m.closed
	if !full && !closed {
		m.live++
	}
	m.mu.Unlock()
	for i, s := range stops {
		m.stopProc(s, procs[i], "evicted for the host cap")
	}
	switch {
	case closed:
		return fmt.Errorf("%w: the executor is shutting down", broker.ErrUnavailable)
	case full:
		return fmt.Errorf("%w: all %d session processes of this host are busy; retry shortly", broker.ErrUnavailable, m.o.MaxLive)
	}
	return nil
}

// unslot gives back a slot that slot reserved and no process took.
func (m *Manager) unslot() {
	m.mu.Lock()
	m.live--
	m.mu.Unlock()
}

// cacheDir names the directory of Options.Root that holds the sessions' caches.
const cacheDir = ".cache"

// startProc assembles want and starts a process on it, with s's workspace and cache.
func (m *Manager) startProc(ctx context.Context, s *session, want binding) (*proc, error) {
	env, err := m.o.assemble(ctx, want.python, want.layers)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", s.id, err)
	}
	ws, err := m.workspaceDir(ctx, s.id)
	if err != nil {
		env.Release()
		return nil, err
	}
	cache, err := m.sessionCache(ctx, s.id)
	if err != nil {
		env.Release()
		return nil, err
	}
	spec := sandbox.Spec{Workspace: ws, Cache: cache, Limits: m.o.Limits}
	env.Apply(&spec)
	p := &proc{env: env, spec: spec, binds: want}
	if err := m.launch(ctx, s, p); err != nil {
		env.Release()
		return nil, err
	}
	return p, nil
}

// launch starts p's process from p.spec.
func (m *Manager) launch(ctx context.Context, s *session, p *proc) error {
	start := time.Now()
	k, err := m.o.start(ctx, p.spec)
	if err != nil {
		return fmt.Errorf("session %s: starting its interpreter: %w", s.id, err)
	}
	p.k, p.started = k, m.o.Now()
	m.o.Logger.Info("session process started", "session", s.id, "pid", k.PID(), "layers", len(p.spec.Layers),
		"degraded", p.spec.Degraded(), "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// sessionCache returns <Root>/.cache/<id>, made on first use (sandbox.Spec.Cache).
func (m *Manager) sessionCache(ctx context.Context, id string) (string, error) {
	ident, err := m.identity(ctx)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(m.o.Root, cacheDir, id)
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		if m.chown {
			if err := os.Lchown(dir, ident.UID, ident.GID); err != nil {
				return "", fmt.Errorf("session %s: handing its cache to the sandbox user: %w", id, err)
			}
		}
	case errors.Is(err, os.ErrExist):
	default:
		return "", fmt.Errorf("session %s: creating its cache under --sessions-dir: %w", id, err)
	}
	return dir, nil
}
