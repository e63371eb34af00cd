//go:build !lean

package cli

import (
	"strings"
	"testing"
)

// TestServeBrokerFlags: serve --broker refuses the broker's own flags, a host that would
// run no sessions, a grant TTL out of range and a URL that is not one, before it starts.
func TestServeBrokerFlags(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", e.path("b.db")}, "--db: not with --broker"},
		{[]string{"--catalog", "c.yaml", "--audit-retention", "90d"}, "--catalog, --audit-retention: not with --broker"},
		{[]string{"--exec-max-live", "0"}, "runs no sessions"},
		{[]string{"--grant-ttl", "11s"}, "--grant-ttl 11s: want 0 to 10s"},
		{[]string{"--grant-ttl", "-1s"}, "want 0 to 10s"},
	} {
		_, _, err := e.run(append([]string{"serve", "--listen", "127.0.0.1:0", "--broker", "http://127.0.0.1:1"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve --broker %v: %v, want %q", c.args, err, c.want)
		}
	}
	if _, _, err := e.run("serve", "--listen", "127.0.0.1:0", "--broker", "ftp://broker"); err == nil || !strings.Contains(err.Error(), "--broker") {
		t.Errorf("serve --broker ftp://: %v", err)
	}
}
