//go:build linux

package sandbox

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"testing"
)

// TestDataPipe: what bwrap reads from a data descriptor is the data, whole, for data
// written at once (empty, one byte, a page) and for data written while it is read.
func TestDataPipe(t *testing.T) {
	for _, n := range []int{0, 1, 4096, 4097, 1 << 20} {
		data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		r, err := dataPipe(data)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%d bytes: read %d bytes (%v); want the %d written", n, len(got), err, n)
		}
	}
}

// userNameOracle is the expression validUserName implements.
var userNameOracle = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

func TestValidUserName(t *testing.T) {
	for _, s := range []string{"", "a", "_", "-", "0", "pylayer-sandbox", "a-", "a0_-", "A", "aB", "a.b", "a b",
		"é", "a\n", strings.Repeat("a", 32), strings.Repeat("a", 33), "_" + strings.Repeat("9", 31)} {
		if got, want := validUserName(s), userNameOracle.MatchString(s); got != want {
			t.Errorf("validUserName(%q) = %v; want %v", s, got, want)
		}
	}
}

func FuzzValidUserName(f *testing.F) {
	f.Add("pylayer-sandbox")
	f.Add("-a")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validUserName(s), userNameOracle.MatchString(s); got != want {
			t.Errorf("validUserName(%q) = %v; want %v", s, got, want)
		}
	})
}
