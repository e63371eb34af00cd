//go:build !lean

package cli

import (
	"testing"
	"time"
)

func TestRetentionFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		str  string
	}{
		{"90d", 90 * 24 * time.Hour, "90d"},
		{"36h", 36 * time.Hour, "36h0m0s"},
		{"off", 0, "off"},
		{"0", 0, "off"},
	} {
		var r retention
		if err := r.Set(tc.in); err != nil {
			t.Fatalf("Set(%q): %v", tc.in, err)
		}
		if time.Duration(r) != tc.want || r.String() != tc.str {
			t.Errorf("Set(%q) = %v (%s), want %v (%s)", tc.in, time.Duration(r), r.String(), tc.want, tc.str)
		}
	}
	for _, bad := range []string{"d", "-3d", "1.5d", "soon", "-1h"} {
		var r retention
		if err := r.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted %v", bad, time.Duration(r))
		}
	}
}
