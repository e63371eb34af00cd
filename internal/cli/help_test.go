//go:build !lean

package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestExamplesParse: every command that runs something shows examples, and each example
// names a command that exists and flags that command has, so help never teaches a
// command line that fails.
func TestExamplesParse(t *testing.T) {
	root := New()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c == root || c.Name() == "help" || c.Name() == "completion" || c.Parent().Name() == "completion" || c.Hidden {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no examples", c.CommandPath())
			return
		}
		for _, line := range exampleLines(c.Example) {
			words := shellWords(line)
			for len(words) > 0 && strings.Contains(words[0], "=") { // VAR=value before the command
				words = words[1:]
			}
			if len(words) == 0 || words[0] != "pylayer" {
				continue
			}
			found, args, err := root.Find(words[1:])
			if err != nil || found != c && found.Parent() != c {
				if err != nil || found == root {
					t.Errorf("%s: example %q: no such command (%v)", c.CommandPath(), line, err)
				}
				continue
			}
			found.InitDefaultHelpFlag()
			if err := found.ParseFlags(args); err != nil {
				t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
			}
		}
	}
	walk(root)
}

// exampleLines joins continued lines and drops comments and pipes.
func exampleLines(ex string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(ex, "\n") {
		l = strings.TrimSpace(l)
		if i := strings.Index(l, " #"); i >= 0 {
			l = strings.TrimSpace(l[:i])
		}
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		l = cur + l
		cur = ""
		if i := strings.Index(l, " | "); i >= 0 {
			l = l[:i]
		}
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// shellWords splits a line as a shell would for these examples: spaces, single and
// double quotes.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestCompletions: flags whose values are a fixed set complete to that set.
func TestCompletions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"token", "create", "--role", ""}, []string{"admin", "owner"}},
		{[]string{"lock", "--kind", ""}, []string{"base", "ext", "iso"}},
		{[]string{"export", "x.lock.json", "--format", ""}, []string{"requirements", "pylock"}},
		{[]string{"lock", "--python", ""}, []string{"3.11", "3.12"}},
		{[]string{"lock", "--platform", ""}, []string{"manylinux_2_28_x86_64", "manylinux_2_28_aarch64"}},
	} {
		root := New()
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{cobra.ShellCompRequestCmd}, tc.args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains("\n"+out.String(), "\n"+w+"\n") && !strings.Contains("\n"+out.String(), "\n"+w+"\t") {
				t.Errorf("completing %v: %q lacks %q", tc.args, out.String(), w)
			}
		}
	}
}
