package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

func TestStateKeptAcrossCalls(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	if r := h.exec(s, "set x 41", false); r.Status != broker.RunOK || r.Restarted || r.RunID == "" {
		t.Fatalf("first call: %+v", r)
	}
	r := h.exec(s, "get x", false)
	if r.Status != broker.RunOK || r.Stdout != "41" || r.Restarted {
		t.Fatalf("second call: %+v", r)
	}
	if n := h.starts(); n != 1 {
		t.Fatalf("%d processes started, want 1", n)
	}
	if r.Outputs == nil {
		t.Error("Outputs is nil: the JSON would say null, not []")
	}
	spec := h.kernel(0).spec
	if spec.Workspace != h.root+"/ses_a" || spec.Cache != h.root+"/.cache/ses_a" || spec.Interpreter != "/fake/python" {
		t.Errorf("spec: workspace %q cache %q interpreter %q", spec.Workspace, spec.Cache, spec.Interpreter)
	}
}

func TestEvents(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	var evs []broker.ExecEvent
	res, err := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "print hi"}, func(e broker.ExecEvent) { evs = append(evs, e) })
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
		if e.RunID != res.RunID {
			t.Errorf("event %s has run id %q, want %q", e.Type, e.RunID, res.RunID)
		}
	}
	if got := strings.Join(types, ","); got != "start,stream,result" {
		t.Errorf("events %s, want start,stream,result", got)
	}
	if last := evs[len(evs)-1]; last.Result == nil || last.Result.Stdout != "hi" {
		t.Errorf("result event %+v", last)
	}
}

func TestBusy(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	done := make(chan broker.ExecResult)
	go func() {
		r, _ := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "wait"}, nil)
		done <- r
	}()
	<-h.entered
	_, err := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "get x"}, nil)
	if !errors.Is(err, broker.ErrBusy) {
		t.Fatalf("a second concurrent call: %v, want ErrBusy", err)
	}
	if _, err := h.m.Shell(context.Background(), s, broker.ShellRequest{Command: "true"}); !errors.Is(err, broker.ErrBusy) {
		t.Fatalf("a concurrent shell call: %v, want ErrBusy", err)
	}
	// another session is not held up
	if r := h.exec(h.session("ses_b"), "set y 1", false); r.Status != broker.RunOK {
		t.Fatalf("another session: %+v", r)
	}
	h.release <- struct{}{}
	if r := <-done; r.Status != broker.RunOK {
		t.Fatalf("the first call: %+v", r)
	}
	if r := h.exec(s, "set x 1", false); r.Status != broker.RunOK {
		t.Fatalf("after the first call ended: %+v", r)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	runID := make(chan string, 1)
	done := make(chan broker.ExecResult)
	go func() {
		r, _ := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "wait"}, func(e broker.ExecEvent) {
			if e.Type == broker.EventStart {
				runID <- e.RunID
			}
		})
		done <- r
	}()
	id := <-runID
	<-h.entered
	if sid, ok := h.m.RunSession(id); !ok || sid != "ses_a" {
		t.Fatalf("RunSession(%s) = %q, %v", id, sid, ok)
	}
	if err := h.m.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Status != broker.RunCancelled || r.RunID != id {
		t.Fatalf("cancelled call: %+v", r)
	}
	if err := h.m.Cancel(context.Background(), id); err != nil {
		t.Errorf("cancelling a run that ended: %v", err)
	}
	if err := h.m.Cancel(context.Background(), "nosuchrun"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("cancelling an unknown run: %v, want ErrNotFound", err)
	}
	runs := h.m.Runs("ses_a", 10)
	if len(runs) != 1 || runs[0].RunID != id || runs[0].Status != broker.RunCancelled || runs[0].Summary != "wait" || runs[0].Kind != broker.RunKindExec {
		t.Fatalf("runs: %+v", runs)
	}
	// the state survived: the process was interrupted, not restarted
	if n := h.starts(); n != 1 {
		t.Errorf("%d processes started, want 1", n)
	}
}

func TestRunsKept(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	var first string
	for i := range keepRuns + 5 {
		r := h.exec(s, fmt.Sprintf("set k%d v", i), false)
		if i == 0 {
			first = r.RunID
		}
	}
	runs := h.m.Runs("ses_a", 0)
	if len(runs) != keepRuns || runs[0].Summary != fmt.Sprintf("set k%d v", keepRuns+4) {
		t.Fatalf("%d runs kept, newest %q", len(runs), runs[0].Summary)
	}
	if _, ok := h.m.RunSession(first); ok {
		t.Error("a run pushed out of the kept runs is still known")
	}
	if got := h.m.Runs("ses_a", 3); len(got) != 3 {
		t.Errorf("limit 3: %d runs", len(got))
	}
	if got := h.m.Runs("ses_none", 3); got == nil || len(got) != 0 {
		t.Errorf("an unknown session's runs: %#v", got)
	}
}

func TestIdleEviction(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.IdleTimeout = time.Minute; o.HealthEvery = time.Hour })
	s := h.session("ses_a")
	h.exec(s, "set x 1", false)
	h.clock.advance(59 * time.Second)
	h.m.sweep(context.Background())
	if !h.kernel(0).alive() {
		t.Fatal("evicted before its idle timeout")
	}
	h.clock.advance(time.Second)
	h.m.sweep(context.Background())
	if h.kernel(0).alive() {
		t.Fatal("not evicted after its idle timeout")
	}
	r := h.exec(s, "get x", false)
	if r.Status != broker.RunError || !r.Restarted || !strings.Contains(r.RestartReason, "idle") || h.starts() != 2 {
		t.Fatalf("after eviction: %+v (%d starts)", r, h.starts())
	}
	if r := h.exec(s, "set x 2", false); r.Restarted {
		t.Errorf("the call after: restarted again: %q", r.RestartReason)
	}
}

func TestHealthCheck(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.HealthEvery = time.Second })
	s := h.session("ses_a")
	h.exec(s, "set x 1", false)
	h.m.sweep(context.Background()) // pinged within HealthEvery of the call: not yet
	h.clock.advance(time.Second)
	h.m.sweep(context.Background())
	if !h.kernel(0).alive() {
		t.Fatal("a healthy process was dropped")
	}
	h.mu.Lock()
	h.started[0].pingErr = errors.New("no answer")
	h.mu.Unlock()
	h.clock.advance(time.Second)
	h.m.sweep(context.Background())
	if h.kernel(0).alive() {
		t.Fatal("a process failing its health check was kept")
	}
	r := h.exec(s, "set x 1", false)
	if !r.Restarted || !strings.Contains(r.RestartReason, "health") {
		t.Fatalf("after a failed health check: %+v", r)
	}
	// a process that exited while idle is dropped by the sweep too
	h.kernel(1).die()
	h.m.sweep(context.Background())
	if r := h.exec(s, "set x 1", false); !r.Restarted || !strings.Contains(r.RestartReason, "exited") {
		t.Fatalf("after an exit while idle: %+v", r)
	}
}

func TestHostCap(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxLive = 2 })
	a, b, c, d := h.session("ses_a"), h.session("ses_b"), h.session("ses_c"), h.session("ses_d")
	h.exec(a, "set x 1", false)
	h.clock.advance(time.Second)
	h.exec(b, "set x 1", false)
	h.clock.advance(time.Second)
	h.exec(c, "set x 1", false) // evicts a, the oldest idle
	if h.kernel(0).alive() || !h.kernel(1).alive() || !h.kernel(2).alive() {
		t.Fatalf("after a third session: alive a=%v b=%v c=%v, want false true true",
			h.kernel(0).alive(), h.kernel(1).alive(), h.kernel(2).alive())
	}
	// b and c busy: d finds no room
	var waits []chan broker.ExecResult
	for _, s := range []broker.Session{b, c} {
		ch := make(chan broker.ExecResult)
		waits = append(waits, ch)
		go func() {
			r, _ := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "wait"}, nil)
			ch <- r
		}()
		<-h.entered
	}
	if _, err := h.m.Exec(context.Background(), d, broker.ExecRequest{Code: "set x 1"}, nil); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("a session past the cap with all busy: %v, want ErrUnavailable", err)
	}
	h.release <- struct{}{} // to either of them
	h.release <- struct{}{}
	for _, ch := range waits {
		<-ch
	}
	if r := h.exec(a, "get x", false); !r.Restarted || !strings.Contains(r.RestartReason, "make room") {
		t.Fatalf("the evicted session's next call: %+v", r)
	}
}

func TestCrashRestartsOnce(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	h.exec(s, "set x 1", false)
	r := h.exec(s, "crash", false)
	if r.Status != broker.RunError || !r.Restarted || !strings.Contains(r.RestartReason, "crashed") || h.starts() != 2 {
		t.Fatalf("first crash: %+v (%d starts)", r, h.starts())
	}
	if r := h.exec(s, "set x 2", false); r.Status != broker.RunOK || r.Restarted {
		t.Fatalf("the restarted process: %+v", r)
	}
	// crash, success, crash: not two in a row
	if r := h.exec(s, "crash", false); !r.Restarted || h.starts() != 3 {
		t.Fatalf("a crash after a success: %+v (%d starts)", r, h.starts())
	}
	r = h.exec(s, "crash", false)
	if r.Status != broker.RunError || r.Error == nil || !strings.Contains(r.Error.EValue, "second call in a row") || h.starts() != 3 {
		t.Fatalf("second crash in a row: %+v (%d starts)", r, h.starts())
	}
	r = h.exec(s, "set x 3", false)
	if r.Status != broker.RunError || r.Error == nil || r.Error.EName != "SessionDead" || h.starts() != 3 {
		t.Fatalf("after two crashes: %+v (%d starts)", r, h.starts())
	}
	if sr, err := h.m.Shell(context.Background(), s, broker.ShellRequest{Command: "true"}); err != nil || sr.Status != broker.RunError {
		t.Fatalf("shell after two crashes: %+v, %v", sr, err)
	}
	r = h.exec(s, "set x 4", true)
	if r.Status != broker.RunOK || !r.Restarted || r.RestartReason != "reset requested" || h.starts() != 4 {
		t.Fatalf("reset after two crashes: %+v (%d starts)", r, h.starts())
	}
}

func TestTimeoutIgnoringInterrupt(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	h.exec(s, "set x 1", false)
	for i := range 2 { // never counted as crashes
		r := h.exec(s, "hang", false)
		if r.Status != broker.RunTimeout || !r.Restarted || !strings.Contains(r.RestartReason, "ignored the interrupt") || h.starts() != 2+i {
			t.Fatalf("hang %d: %+v (%d starts)", i, r, h.starts())
		}
	}
	if r := h.exec(s, "set x 1", false); r.Status != broker.RunOK || r.Restarted {
		t.Fatalf("after: %+v", r)
	}
}

func TestReset(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	if r := h.exec(s, "set x 1", true); r.Restarted {
		t.Errorf("reset on first use says restarted: %q", r.RestartReason)
	}
	r := h.exec(s, "get x", true)
	if r.Status != broker.RunError || !r.Restarted || h.starts() != 2 || h.kernel(0).alive() {
		t.Fatalf("reset: %+v (%d starts)", r, h.starts())
	}
}

func TestRebindRestarts(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	h.exec(s, "set x 1", false)
	reads := h.store.reads
	h.exec(s, "get x", false)
	if n := h.store.reads - reads; n != 1 {
		t.Errorf("a call read the session %d times, want 1", n)
	}
	ext := "reg.example/team/pylayer@sha256:" + strings.Repeat("3", 64)
	h.store.bind("ses_a", ext)
	var restart string
	r, err := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "layers"}, func(e broker.ExecEvent) {
		if e.Type == broker.EventRestart {
			restart = e.Reason
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Restarted || !strings.HasPrefix(r.RestartReason, "bindings changed: added sha256:333333333333") || restart != r.RestartReason {
		t.Fatalf("after a rebind: %+v (event %q)", r, restart)
	}
	if !strings.Contains(r.Stdout, "/fake/33333333") {
		t.Errorf("the new layer is not mounted: %q", r.Stdout)
	}
	if h.kernel(0).alive() || h.starts() != 2 {
		t.Errorf("the old process lives on (%d starts)", h.starts())
	}
}

func TestStartFailure(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxLive = 1 })
	s := h.session("ses_a")
	h.startErr = errors.New("bwrap: no")
	if _, err := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "set x 1"}, nil); err == nil {
		t.Fatal("a failed start is not an error")
	}
	h.startErr = nil
	// the slot was given back: the only one is free
	if r := h.exec(s, "set x 1", false); r.Status != broker.RunOK {
		t.Fatalf("after a failed start: %+v", r)
	}
	if _, err := h.m.Exec(context.Background(), h.session("ses_b"), broker.ExecRequest{Code: "x", Timeout: 601}, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("timeout 601: %v, want ErrInvalid", err)
	}
	if _, err := h.m.Exec(context.Background(), broker.Session{ID: "../x"}, broker.ExecRequest{Code: "x"}, nil); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("session ../x: %v, want ErrInvalid", err)
	}
}

func TestShellCrash(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	r, err := h.m.Shell(context.Background(), s, broker.ShellRequest{Command: "echo hi"})
	if err != nil || r.Status != broker.RunOK || r.Stdout != "echo hi" || r.RunID == "" {
		t.Fatalf("shell: %+v, %v", r, err)
	}
	r, err = h.m.Shell(context.Background(), s, broker.ShellRequest{Command: "crash"})
	if err != nil || r.Status != broker.RunError || !r.Restarted || h.starts() != 2 {
		t.Fatalf("shell crash: %+v, %v", r, err)
	}
	if runs := h.m.Runs("ses_a", 0); len(runs) != 2 || runs[0].Kind != broker.RunKindShell {
		t.Errorf("runs: %+v", runs)
	}
}

func TestClose(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	done := make(chan error)
	go func() {
		_, err := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "wait"}, nil)
		done <- err
	}()
	<-h.entered
	h.exec(h.session("ses_b"), "set x 1", false)
	if err := h.m.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
	for i := range h.starts() {
		if h.kernel(i).alive() {
			t.Errorf("process %d lives after Close", i)
		}
	}
	if _, err := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "x"}, nil); !errors.Is(err, broker.ErrUnavailable) {
		t.Errorf("after Close: %v, want ErrUnavailable", err)
	}
	if h.m.live != 0 {
		t.Errorf("%d live after Close", h.m.live)
	}
}

func TestSummary(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"\n  import os\nprint(1)", "import os"},
		{strings.Repeat("é", 100), strings.Repeat("é", 79) + "…"},
		{"", ""},
	} {
		if got := summary(c.in); got != c.want {
			t.Errorf("summary(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRecordsForgotten: a session with no process, unused for ForgetAfter, leaves no
// record (its runs, their owners) behind, so a host that serves many sessions over time
// does not grow; one still used, or with a process, is kept.
func TestRecordsForgotten(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.IdleTimeout = time.Minute; o.HealthEvery = time.Hour })
	ctx := context.Background()
	a, b := h.session("ses_a"), h.session("ses_b")
	ra := h.exec(a, "set x 1", false)
	h.clock.advance(time.Minute)
	h.m.sweep(ctx) // a's process is stopped: idle
	if h.kernel(0).alive() {
		t.Fatal("not evicted")
	}
	h.clock.advance(ForgetAfter - 2*time.Minute)
	rb := h.exec(b, "set y 1", false)
	h.m.sweep(ctx)
	if len(h.m.Runs("ses_a", 0)) != 1 {
		t.Fatal("a session forgotten before ForgetAfter")
	}
	h.clock.advance(time.Minute)
	h.m.sweep(ctx)
	h.m.mu.Lock()
	_, kept := h.m.sessions["ses_a"]
	_, owned := h.m.owner[ra.RunID]
	n := len(h.m.sessions)
	h.m.mu.Unlock()
	if kept || owned || n != 1 {
		t.Fatalf("after ForgetAfter: record kept %v, run owned %v, %d records", kept, owned, n)
	}
	if _, ok := h.m.RunSession(rb.RunID); !ok {
		t.Fatal("the used session's run was forgotten")
	}
	// A forgotten session starts afresh and says why its state is gone only as a new one.
	if r := h.exec(a, "get x", false); r.Status != broker.RunError || r.Restarted {
		t.Fatalf("a forgotten session's next call: %+v", r)
	}
}
