//go:build linux

package sandbox

import (
	"os"
	"testing"
)

// TestNoTerminal: a terminal given as stdin never reaches a session (it reads
// /dev/null instead); anything else is passed on as it is.
func TestNoTerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if got := noTerminal(ptmx); got != nil {
		t.Errorf("noTerminal(a terminal) = %v, want nil (/dev/null)", got)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := noTerminal(r); got != r {
		t.Errorf("noTerminal(a pipe) = %v, want the pipe", got)
	}
}
