//go:build !lean

package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVersion: --version answers before the command tree is built, in the form cobra's
// own flag would, and names the Go toolchain and platform.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	got := out.String()
	if !strings.HasPrefix(got, "pylayer version ") || !strings.Contains(got, " go1.") || !strings.HasSuffix(got, "\n") || errb.Len() != 0 {
		t.Errorf("stdout %q, stderr %q; want \"pylayer version V goX.Y OS/ARCH\\n\" and nothing on stderr", got, errb.String())
	}
	if want := "pylayer version " + Version() + "\n"; got != want || New().Version != Version() {
		t.Errorf("--version says %q, the command tree's version is %q; want both %q", got, New().Version, want)
	}
}
