package pep440

import (
	"strings"
	"testing"
)

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.0", "v1!2.0rc1.post2.dev3+abc.01", "1.0-1", " 1.0a ", "1.0+ubuntu-1", "1.0.*", "1..0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		w, err := Parse(v.String())
		if err != nil {
			t.Fatalf("String() %q of %q does not re-parse: %v", v, s, err)
		}
		if !w.Equal(v) || w.String() != v.String() || v.Compare(w) != 0 {
			t.Fatalf("%q -> %q -> %q", s, v, w)
		}
		if v.Public()+map[bool]string{true: "+" + v.Local(), false: ""}[v.Local() != ""] != v.String() {
			t.Fatalf("Public/Local do not add up for %q", v)
		}
		_ = v.Compare(MustParse("1.0"))
	})
}

func FuzzParseSpecifierSet(f *testing.F) {
	for _, s := range []string{">=1.0,<2", "==1.0.*", "~=2.2", "===foo", "!=1.5.*,>1.0.post1", "", "~=1", "<=v1!2.0a1.dev0"} {
		f.Add(s, "1.0")
	}
	f.Fuzz(func(t *testing.T, s, version string) {
		set, err := ParseSpecifierSet(s)
		if err != nil {
			return
		}
		again, err := ParseSpecifierSet(set.String())
		if err != nil {
			t.Fatalf("String() %q of %q does not re-parse: %v", set, s, err)
		}
		if again.String() != set.String() {
			t.Fatalf("%q -> %q -> %q", s, set, again)
		}
		if len(set.Clauses()) != len(strings.Split(set.String(), ",")) && !set.IsEmpty() && !strings.Contains(set.String(), "===") {
			t.Fatalf("clauses of %q: %v", set, set.Clauses())
		}
		if v, err := Parse(version); err == nil {
			for _, pre := range []bool{true, false} {
				if set.Contains(v, pre) != again.Contains(v, pre) {
					t.Fatalf("%q and its String %q disagree on %s", s, set, v)
				}
			}
			_ = set.Filter([]Version{v}, nil)
		}
	})
}
