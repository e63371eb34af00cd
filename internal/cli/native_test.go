//go:build !lean

package cli

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/test/fixture"
)

// TestBuildWarnsNative: a wheel whose extension module needs a library it does not
// vendor builds, with a warning naming the wheel, the soname and the file on stderr and
// in --json.
func TestBuildWarnsNative(t *testing.T) {
	e := newEnv(t)
	idx := t.TempDir()
	w, err := fixture.NeedyWheel(t.Context(), "needy", "1.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(idx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fixture.PlainIndex(idx))
	t.Cleanup(srv.Close)
	e.must(nil, args("lock", "needy", "--index-url", srv.URL+"/simple/", tgtFlags, "-o", e.path("n.lock.json"))...)
	want := w.Filename() + " needs libcrypto.so.3 (by site-packages/needy/_ext.so), which is neither in the wheel nor on the manylinux_2_28 allow-list"
	stdout, stderr, err := e.run("build", e.path("n.lock.json"), "-o", "oci:"+e.path("layout"), "--json")
	if err != nil {
		t.Fatalf("build: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "warning: "+want) {
		t.Errorf("stderr %q lacks the warning %q", stderr, want)
	}
	var res struct {
		Built    bool
		Warnings []string
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Built || len(res.Warnings) != 1 || res.Warnings[0] != want {
		t.Errorf("build --json: %+v, want built with the warning %q", res, want)
	}
}
