package kernel

import (
	"errors"
	"testing"
	"time"

	"github.com/pylayer/pylayer/sandbox"
)

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.MaxOutput != DefaultMaxOutput || o.Grace != DefaultGrace || o.StartTimeout != DefaultStartTimeout {
		t.Fatalf("%+v, %v", o, err)
	}
	o, err = Options{MaxOutput: 5, Grace: time.Second}.withDefaults()
	if err != nil || o.MaxOutput != 5 || o.Grace != time.Second {
		t.Fatalf("%+v, %v", o, err)
	}
	for _, bad := range []Options{{MaxOutput: -1}, {Grace: -1}, {StartTimeout: -1}} {
		if _, err := bad.withDefaults(); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%+v: %v, want ErrInvalidSpec", bad, err)
		}
	}
}

func TestExitReason(t *testing.T) {
	for code, want := range map[int]string{
		0:   "the Python process exited with status 0",
		3:   "the Python process exited with status 3",
		137: "the Python process exited with signal SIGKILL",
		139: "the Python process exited with signal SIGSEGV",
		255: "the Python process exited with status 255",
	} {
		if got := exitReason(code); got != want {
			t.Errorf("exitReason(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestTail(t *testing.T) {
	tl := tail{max: 12}
	if tl.suffix() != "" {
		t.Fatalf("empty tail: %q", tl.suffix())
	}
	tl.Write([]byte("bwrap: "))
	tl.Write([]byte("x\xffpermission\n"))
	if got := tl.suffix(); got != ": ?permission" {
		t.Fatalf("suffix %q", got)
	}
}
