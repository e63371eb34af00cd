//go:build !lean

package cli

import (
	"bytes"
	"context"
	"testing"
)

// TestTreeOfOne: Main builds only the subcommand a command line names; each entry of
// commands builds the command of its name, and that command's help, a usage error and
// --json's error are what the whole tree gives for the same command line.
func TestTreeOfOne(t *testing.T) {
	for _, c := range commands {
		if got := newTree(c.name).Commands(); len(got) != 1 || got[0].Name() != c.name {
			t.Fatalf("newTree(%q) has %d subcommands (first %q); want only %q", c.name, len(got), got[0].Name(), c.name)
		}
	}
	if got, want := len(New().Commands()), len(commands); got < want {
		t.Fatalf("the whole tree has %d subcommands; want at least %d", got, want)
	}
	run := func(t *testing.T, whole bool, args []string) (int, string, string) {
		root := newTree(args[0])
		if whole {
			root = New()
		}
		var out, errb bytes.Buffer
		root.SetArgs(args)
		root.SetOut(&out)
		root.SetErr(&errb)
		err := root.ExecuteContext(context.Background())
		code := 0
		if err != nil {
			code = 1
			errb.WriteString(err.Error())
		}
		return code, out.String(), errb.String()
	}
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "--no-such-flag"}, {c.name, "--json", "--no-such-flag"}} {
			wc, wo, we := run(t, true, args)
			gc, gout, ge := run(t, false, args)
			if gc != wc || gout != wo || ge != we {
				t.Errorf("%q: with one subcommand: exit %d, stdout %q, stderr %q; the whole tree: exit %d, stdout %q, stderr %q",
					args, gc, gout, ge, wc, wo, we)
			}
			if args[1] == "--help" && (wc != 0 || len(wo) < 50) {
				t.Errorf("%q: exit %d, stdout %q; want help", args, wc, wo)
			}
		}
	}
}
