package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// TestRunsInFlight: a shell call under way is listed first, as running, with its
// duration so far; a call refused meanwhile is ErrBusy, and cancelling the listed run
// ends the shell call, which is then listed as cancelled.
func TestRunsInFlight(t *testing.T) {
	h := newHarness(t, nil)
	s := h.session("ses_a")
	h.exec(s, "set x 1", false)
	done := make(chan broker.ShellResult)
	go func() {
		r, err := h.m.Shell(context.Background(), s, broker.ShellRequest{Command: "wait"})
		if err != nil {
			t.Errorf("shell: %v", err)
		}
		done <- r
	}()
	<-h.entered
	h.clock.advance(1500 * time.Millisecond)
	runs := h.m.Runs("ses_a", 10)
	if len(runs) != 2 {
		t.Fatalf("runs while the shell call runs: %+v, want it and the exec before", runs)
	}
	live := runs[0]
	if live.Status != broker.RunRunning || live.Kind != broker.RunKindShell || live.Summary != "wait" ||
		live.SessionID != "ses_a" || live.DurationMS != 1500 || live.RunID == "" {
		t.Fatalf("the run under way: %+v", live)
	}
	if runs[1].Status != broker.RunOK || runs[1].Kind != broker.RunKindExec {
		t.Fatalf("the finished run: %+v", runs[1])
	}
	if got := h.m.Runs("ses_a", 1); len(got) != 1 || got[0].RunID != live.RunID {
		t.Fatalf("Runs(limit 1) = %+v, want the run under way", got)
	}
	if got := h.m.Runs("ses_b", 10); len(got) != 0 {
		t.Fatalf("another session's runs: %+v", got)
	}
	if _, err := h.m.Exec(context.Background(), s, broker.ExecRequest{Code: "get x"}, nil); !errors.Is(err, broker.ErrBusy) {
		t.Fatalf("exec during the shell call: %v, want ErrBusy", err)
	}
	if sid, ok := h.m.RunSession(live.RunID); !ok || sid != "ses_a" {
		t.Fatalf("RunSession(%s) = %q, %v", live.RunID, sid, ok)
	}
	if err := h.m.Cancel(context.Background(), live.RunID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Status != broker.RunCancelled || r.RunID != live.RunID {
		t.Fatalf("the cancelled shell call: %+v", r)
	}
	runs = h.m.Runs("ses_a", 10)
	if len(runs) != 2 || runs[0].RunID != live.RunID || runs[0].Status != broker.RunCancelled {
		t.Fatalf("runs after the cancel: %+v", runs)
	}
	// the process was interrupted, not restarted: its state is there
	if r := h.exec(s, "get x", false); r.Status != broker.RunOK || r.Stdout != "1" {
		t.Fatalf("state after the cancelled shell call: %+v", r)
	}
}
