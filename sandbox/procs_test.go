//go:build linux

package sandbox

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		in          string
		state, ppid string
	}{
		{"42 (sh) S 7 42 42 0 -1", "S", "7"},
		{"42 (a) b) (c) R 9 1", "R", "9"},
		{"42 (x y\nz) Z 1", "Z", "1"},
		{"garbage", "", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		f := parseStat([]byte(tt.in))
		var state, ppid string
		if len(f) >= 2 {
			state, ppid = f[0], f[1]
		}
		if state != tt.state || ppid != tt.ppid {
			t.Errorf("parseStat(%q) = %q", tt.in, f)
		}
	}
	// Our own process: the parent is the real one and the start time is there.
	f := statFields(os.Getpid())
	if len(f) < 20 || f[1] != strconv.Itoa(os.Getppid()) {
		t.Errorf("statFields(self) = %q", f)
	}
	if !slices.Contains(descendants(os.Getppid()), os.Getpid()) {
		t.Error("descendants of our parent do not include us")
	}
}

// FuzzParseStat: any bytes parse without panicking, and a well-formed line with
// any command name yields its state and parent pid.
func FuzzParseStat(f *testing.F) {
	f.Add("sh", "S", 7)
	f.Add("a) b) (", "R", 0)
	f.Add("", "Z", 1<<30)
	f.Fuzz(func(t *testing.T, comm, state string, ppid int) {
		parseStat([]byte(comm + state))
		if strings.ContainsAny(state, " \t\n\v\f\r\x85\xa0)") || state == "" || strings.ContainsFunc(state, func(r rune) bool { return r > 127 }) {
			return
		}
		line := "12 (" + comm + ") " + state + " " + strconv.Itoa(ppid) + " 1 1"
		got := parseStat([]byte(line))
		if len(got) < 2 || got[0] != state || got[1] != strconv.Itoa(ppid) {
			t.Fatalf("parseStat(%q) = %q", line, got)
		}
	})
}
