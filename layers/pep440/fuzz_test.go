package pep440

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.0", "v1!2.0rc1.post2.dev3+abc.01", "1.0-1", " 1.0a ", "1.0+ubuntu-1", "1.0.*", "1..0", "", "2.31", "007.0", "1.99999999999999999999", ".1", "1."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		checkReleasePath(t, s)
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

// checkReleasePath: where Parse takes its path for bare releases, it gives what
// versionRE gives, errors included.
func checkReleasePath(t *testing.T, s string) {
	t.Helper()
	trimmed := TrimSpace(s)
	if !isASCII(trimmed) || !isRelease(trimmed) {
		return
	}
	v, err := parseRelease(s, trimmed)
	w, werr := parseRE(s, trimmed)
	if fmt.Sprint(err) != fmt.Sprint(werr) || !reflect.DeepEqual(v, w) {
		t.Fatalf("%q: the release path gives %#v, %v; versionRE gives %#v, %v", s, v, err, w, werr)
	}
}

func TestReleasePath(t *testing.T) {
	for _, s := range []string{"0", "1", "1.0", " 2.31.0 ", "007.010", "1.2.3.4.5.6", "99999999999999999999.1", "1.99999999999999999999"} {
		if !isRelease(TrimSpace(s)) {
			t.Errorf("%q does not take the release path", s)
		}
		checkReleasePath(t, s)
	}
	for _, s := range []string{"", ".", "1.", ".1", "1..2", "v1", "1.0a1", "1.0.post1", "1.0+local", "1!2", "1.*", "1 .0"} {
		if isRelease(TrimSpace(s)) {
			t.Errorf("%q takes the release path", s)
		}
	}
}
