package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/broker"
)

// binding is what a session's process runs on: the references assemble.Session.Refs
// gives, all by digest, so comparing them compares digests.
type binding struct {
	python string
	layers []string
}

func (b binding) equal(o binding) bool {
	return b.python == o.python && slices.Equal(b.layers, o.layers)
}

// changes says how b differs from old, by digest, for a restart reason.
func (b binding) changes(old binding) string {
	var out []string
	if b.python != old.python {
		out = append(out, fmt.Sprintf("interpreter %s -> %s", short(old.python), short(b.python)))
	}
	for _, l := range b.layers {
		if !slices.Contains(old.layers, l) {
			out = append(out, "added "+short(l))
		}
	}
	for _, l := range old.layers {
		if !slices.Contains(b.layers, l) {
			out = append(out, "removed "+short(l))
		}
	}
	if len(out) == 0 {
		out = append(out, "layer order")
	}
	return "bindings changed: " + strings.Join(out, ", ")
}

// short is the digest of REPO@DIGEST, cut to 12 hex digits; "none" for "".
func short(ref string) string {
	if ref == "" {
		return "none"
	}
	d := ref[strings.LastIndexByte(ref, '@')+1:]
	if alg, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return alg + ":" + hex[:12]
	}
	return d
}

// current reads what s is bound to now: one GetSession and one Bindings.
func (m *Manager) current(ctx context.Context, id string) (binding, error) {
	s, err := m.o.Sessions.GetSession(ctx, id)
	if err != nil {
		return binding{}, fmt.Errorf("session %s: %w", id, err)
	}
	bs, err := m.o.Sessions.Bindings(ctx, id)
	if err != nil {
		return binding{}, fmt.Errorf("session %s: reading its bindings: %w", id, err)
	}
	as := assemble.Session{ID: s.ID, Interpreter: s.Interpreter, Base: s.Base}
	for _, b := range bs {
		as.Bindings = append(as.Bindings, assemble.Binding{Kind: b.Kind, Ref: b.Ref})
	}
	python, layers, err := as.Refs(m.o.Repo)
	if err != nil {
		return binding{}, fmt.Errorf("%w: %w", broker.ErrInvalid, err)
	}
	return binding{python: python, layers: layers}, nil
}

// call is one exec or shell call, holding its session from begin to finish.
type call struct {
	m       *Manager
	s       *session
	id      string
	kind    string
	summary string
	ctx     context.Context
	cancel  context.CancelFunc
	started time.Time
	status  string
	reasons []string // why the process was (re)started during the call
	emit    func(broker.ExecEvent)
}

// errStuck: the session's process crashed in two calls in a row.
var errStuck = errors.New("the session's process crashed in two calls in a row and is not restarted again: " +
	`send a call with "reset": true to start a new one`)

// begin claims s for one call: ErrBusy while another call of s runs.
func (m *Manager) begin(ctx context.Context, sid, kind, summary string, emit func(broker.ExecEvent)) (*call, error) {
	if !validSessionID(sid) {
		return nil, fmt.Errorf("%w: session id %q", broker.ErrInvalid, sid)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: the executor is shutting down", broker.ErrUnavailable)
	}
	s := m.sessionLocked(sid)
	if s.busy {
		m.mu.Unlock()
		return nil, fmt.Errorf("session %s: %w: another call of the session is running (calls of a session run one at a time; cancel it or retry when it ends)", sid, broker.ErrBusy)
	}
	s.busy = true
	id := newRunID()
	c := &call{m: m, s: s, id: id, kind: kind, summary: summary, started: m.o.Now(), status: broker.RunError}
	c.ctx, c.cancel = context.WithCancel(ctx)
	m.active[id] = &activeRun{cancel: c.cancel, info: broker.RunInfo{RunID: id, SessionID: sid, Kind: kind,
		Status: broker.RunRunning, Started: c.started.UTC(), Summary: summary}}
	m.calls.Add(1)
	m.mu.Unlock()
	c.emit = func(e broker.ExecEvent) {
		if emit != nil {
			e.RunID = id
			emit(e)
		}
	}
	s.op.Lock() // a health check may hold it for a moment
	return c, nil
}

// finish records the call among s's runs and lets s go.
func (c *call) finish() {
	m, s := c.m, c.s
	now := m.o.Now()
	ri := broker.RunInfo{RunID: c.id, SessionID: s.id, Kind: c.kind, Status: c.status, Started: c.started.UTC(),
		DurationMS: now.Sub(c.started).Milliseconds(), Summary: c.summary}
	m.mu.Lock()
	delete(m.active, c.id)
	s.runs = append(s.runs, ri)
	m.owner[c.id] = s.id
	if n := len(s.runs) - keepRuns; n > 0 {
		for _, r := range s.runs[:n] {
			delete(m.owner, r.RunID)
		}
		s.runs = slices.Delete(s.runs, 0, n)
	}
	s.lastUsed, s.lastPing = now, now
	s.busy = false
	s.op.Unlock()
	m.mu.Unlock()
	c.cancel()
	m.calls.Done()
	m.o.Logger.Info("session call", "session", s.id, "run", c.id, "kind", c.kind, "status", c.status,
		"duration_ms", ri.DurationMS, "restarted", len(c.reasons) > 0)
}

// restarted tells the call's stream that the process was (re)started, and why.
func (c *call) restarted(why string) {
	c.reasons = append(c.reasons, why)
	c.emit(broker.ExecEvent{Type: broker.EventRestart, Reason: why})
}

func (c *call) restartReason() (bool, string) {
	return len(c.reasons) > 0, strings.Join(c.reasons, "; ")
}

// ready returns the session's process, started (or restarted) as the session's state
// asks: reset, a process gone, bindings changed, first use.
func (c *call) ready(reset bool) (*proc, error) {
	m, s := c.m, c.s
	want, err := m.current(c.ctx, s.id)
	if err != nil {
		return nil, err
	}
	var why string
	m.mu.Lock()
	p := s.cur
	switch {
	case reset:
		s.stuck, s.crashes = false, 0
		if p != nil || s.lost != "" {
			why = "reset requested"
		}
	case s.stuck:
		m.mu.Unlock()
		return nil, errStuck
	case p != nil && exited(p):
		why = "the process had exited; its state was lost"
	case p != nil && !p.binds.equal(want):
		why = want.changes(p.binds)
	case p == nil && s.lost != "":
		why = s.lost + "; its state was lost"
	}
	var old *proc
	if p != nil && why != "" {
		old = m.detachLocked(s, why)
	}
	s.lost = ""
	p = s.cur
	m.mu.Unlock()
	m.stopProc(s, old, why)
	if p != nil {
		return p, nil
	}
	if err := m.slot(s); err != nil {
		return nil, err
	}
	p, err = m.startProc(c.ctx, s, want)
	if err != nil {
		m.unslot()
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.unslot()
		m.stopProc(s, p, "the executor is shutting down")
		return nil, fmt.Errorf("%w: the executor is shutting down", broker.ErrUnavailable)
	}
	s.cur = p
	m.mu.Unlock()
	if why != "" {
		c.restarted(why)
	}
	return p, nil
}

// died handles a process that a call saw end: a cell that ignored its interrupt (the
// call timed out or was cancelled) restarts it; a crash restarts it once, and a second
// crash in a row leaves the session without one until a reset. It returns what the
// call's result says about it, and whether that was a crash.
func (c *call) died(p *proc, status, dead string) (crashed bool, msg string) {
	m, s := c.m, c.s
	crashed = status != broker.RunTimeout && status != broker.RunCancelled
	what := "the cell ignored the interrupt and the process was killed"
	if crashed {
		what = "the process crashed"
		if dead != "" {
			what += " (" + dead + ")"
		}
	}
	m.mu.Lock()
	if crashed {
		s.crashes++
	}
	again := crashed && s.crashes >= 2
	if again {
		s.stuck = true
	}
	closed := m.closed
	m.mu.Unlock()
	if again || closed {
		m.mu.Lock()
		old := m.detachLocked(s, what)
		m.mu.Unlock()
		m.stopProc(s, old, what)
		if again {
			return crashed, what + " again, the second call in a row: " + errStuck.Error()
		}
		return crashed, what
	}
	// Restart in place, on the layers p holds: the session keeps its slot.
	p.k.Close()
	np := &proc{env: p.env, spec: p.spec, binds: p.binds}
	err := m.launch(context.WithoutCancel(c.ctx), s, np)
	m.mu.Lock()
	if err != nil || m.closed {
		m.detachLocked(s, what)
		m.mu.Unlock()
		if err == nil {
			np.k.Close()
		}
		p.env.Release()
		if err != nil {
			m.o.Logger.Warn("restarting a session process failed", "session", s.id, "err", err)
			c.restarted(what + "; restarting it failed, the next call tries again")
		}
		return crashed, what
	}
	s.cur = np
	m.mu.Unlock()
	c.restarted(what + "; restarted, its state was lost")
	return crashed, what
}

// timeout checks a request's timeout in seconds.
func timeout(sec float64) (time.Duration, error) {
	switch {
	case math.IsNaN(sec) || sec < 0 || sec > broker.MaxExecTimeout:
		return 0, fmt.Errorf("%w: timeout %v: want 0 to %d seconds", broker.ErrInvalid, sec, broker.MaxExecTimeout)
	case sec == 0:
		sec = broker.DefaultExecTimeout
	}
	return time.Duration(sec * float64(time.Second)), nil
}

// summary is the first line of code, at most 80 characters.
func summary(code string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(code), "\n")
	line = strings.TrimSpace(line)
	if r := []rune(line); len(r) > 80 {
		line = string(r[:79]) + "…"
	}
	return line
}

func newRunID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Exec runs req.Code in the session's process; see broker.Executor.
func (m *Manager) Exec(ctx context.Context, s broker.Session, req broker.ExecRequest, emit func(broker.ExecEvent)) (broker.ExecResult, error) {
	to, err := timeout(req.Timeout)
	if err != nil {
		return broker.ExecResult{}, err
	}
	c, err := m.begin(ctx, s.ID, broker.RunKindExec, summary(req.Code), emit)
	if err != nil {
		return broker.ExecResult{}, err
	}
	defer c.finish()
	c.emit(broker.ExecEvent{Type: broker.EventStart})
	res, err := c.exec(req, to)
	if err != nil {
		return broker.ExecResult{}, err
	}
	res.RunID = c.id
	if res.Outputs == nil {
		res.Outputs = []broker.Output{}
	}
	res.Restarted, res.RestartReason = c.restartReason()
	c.status = res.Status
	c.emit(broker.ExecEvent{Type: broker.EventResult, Result: &res})
	return res, nil
}

func (c *call) exec(req broker.ExecRequest, to time.Duration) (broker.ExecResult, error) {
	p, err := c.ready(req.Reset)
	if errors.Is(err, errStuck) {
		return broker.ExecResult{Status: broker.RunError, Error: &broker.ExecError{EName: "SessionDead", EValue: errStuck.Error(), Traceback: []string{}}}, nil
	}
	if err != nil {
		return broker.ExecResult{}, err
	}
	res, dead, err := p.k.Exec(c.ctx, req.Code, to, c.emit)
	if err != nil {
		c.drop(p, "the process failed")
		return broker.ExecResult{}, fmt.Errorf("session %s: run %s: %w", c.s.id, c.id, err)
	}
	if dead == "" && !exited(p) {
		c.ok()
		return res, nil
	}
	if dead == "" {
		dead = "exited"
	}
	crashed, msg := c.died(p, res.Status, dead)
	if crashed {
		res.Status = broker.RunError
		if res.Error == nil {
			res.Error = &broker.ExecError{EName: "SessionDied", EValue: msg, Traceback: []string{}}
		}
	}
	return res, nil
}

// Shell runs req.Command with /bin/sh -c in the session's sandbox; see broker.Executor.
func (m *Manager) Shell(ctx context.Context, s broker.Session, req broker.ShellRequest) (broker.ShellResult, error) {
	to, err := timeout(req.Timeout)
	if err != nil {
		return broker.ShellResult{}, err
	}
	c, err := m.begin(ctx, s.ID, broker.RunKindShell, summary(req.Command), nil)
	if err != nil {
		return broker.ShellResult{}, err
	}
	defer c.finish()
	res, err := c.shell(req, to)
	if err != nil {
		return broker.ShellResult{}, err
	}
	res.RunID = c.id
	res.Restarted, res.RestartReason = c.restartReason()
	c.status = res.Status
	return res, nil
}

func (c *call) shell(req broker.ShellRequest, to time.Duration) (broker.ShellResult, error) {
	p, err := c.ready(false)
	if errors.Is(err, errStuck) {
		return broker.ShellResult{Status: broker.RunError, ExitCode: -1, Stderr: errStuck.Error() + "\n"}, nil
	}
	if err != nil {
		return broker.ShellResult{}, err
	}
	res, dead, err := p.k.Shell(c.ctx, req.Command, to)
	if err != nil {
		c.drop(p, "the process failed")
		return broker.ShellResult{}, fmt.Errorf("session %s: run %s: %w", c.s.id, c.id, err)
	}
	if dead == "" && !exited(p) {
		c.ok()
		return res, nil
	}
	if dead == "" {
		dead = "exited"
	}
	if crashed, msg := c.died(p, res.Status, dead); crashed {
		res.Status = broker.RunError
		res.Stderr += msg + "\n"
	}
	return res, nil
}

// ok: the call ended with its process alive, so crashes no longer come in a row.
func (c *call) ok() {
	c.m.mu.Lock()
	c.s.crashes = 0
	c.m.mu.Unlock()
}

// drop stops p after an infrastructure failure; the next call starts another.
func (c *call) drop(p *proc, why string) {
	c.m.mu.Lock()
	var old *proc
	if c.s.cur == p {
		old = c.m.detachLocked(c.s, why)
	}
	c.m.mu.Unlock()
	c.m.stopProc(c.s, old, why)
}

// Cancel interrupts the run runID; see broker.Executor. A run that has ended is not
// an error.
func (m *Manager) Cancel(ctx context.Context, runID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.active[runID]; a != nil {
		a.cancel()
		m.o.Logger.Info("session call cancelled", "session", a.info.SessionID, "run", runID, "kind", a.info.Kind)
		return nil
	}
	if _, ok := m.owner[runID]; ok {
		return nil
	}
	return fmt.Errorf("run %s: %w", runID, broker.ErrNotFound)
}

// RunSession says whose run runID is (under way or among the kept runs).
func (m *Manager) RunSession(runID string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.active[runID]; a != nil {
		return a.info.SessionID, true
	}
	id, ok := m.owner[runID]
	return id, ok
}

// Runs lists up to limit (<= 0: all kept, at most 50 and the one under way) of the
// session's runs, newest first: the run under way, if any (broker.RunRunning, its
// duration so far), then the finished ones.
func (m *Manager) Runs(sessionID string, limit int) []broker.RunInfo {
	now := m.o.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil {
		return []broker.RunInfo{}
	}
	out := make([]broker.RunInfo, 0, len(s.runs)+1)
	for _, a := range m.active { // one at most: calls of a session are serialised
		if a.info.SessionID == sessionID {
			ri := a.info
			ri.DurationMS = max(now.Sub(ri.Started).Milliseconds(), 0)
			out = append(out, ri)
		}
	}
	for i := len(s.runs) - 1; i >= 0; i-- {
		out = append(out, s.runs[i])
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}
