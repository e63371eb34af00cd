package pep440

import (
	"errors"
	"strings"
	"testing"
)

func (p tri) ptr() *bool {
	switch p {
	case yes:
		t := true
		return &t
	case no:
		f := false
		return &f
	}
	return nil
}

func (p tri) String() string { return [...]string{"None", "True", "False"}[p] }

// containsDefault is packaging 26.2's contains(v, prereleases=pre): None
// checks the one version as filter does.
func containsDefault(s SpecifierSet, v Version, pre tri) bool {
	return len(s.Filter([]Version{v}, pre.ptr())) == 1
}

func TestPackagingSpecifierParse(t *testing.T) {
	for _, s := range pkgSpecifierValid {
		if _, err := ParseSpecifier(s); err != nil {
			t.Errorf("ParseSpecifier(%q): %v, packaging 26.2 accepts it", s, err)
		}
	}
	for _, s := range pkgSpecifierInvalid {
		if _, err := ParseSpecifier(s); !errors.Is(err, ErrInvalidSpecifier) && !errors.Is(err, ErrInvalidVersion) {
			t.Errorf("ParseSpecifier(%q) = nil error, packaging 26.2 refuses it", s)
		}
	}
}

func TestPackagingSpecifierContains(t *testing.T) {
	for _, c := range pkgSpecifierContains {
		s, err := ParseSpecifier(c.spec)
		if err != nil {
			t.Fatalf("ParseSpecifier(%q): %v", c.spec, err)
		}
		if got := s.Contains(MustParse(c.version), true); got != c.want {
			t.Errorf("Specifier(%q, prereleases=True).contains(%q) = %v, packaging 26.2 says %v", c.spec, c.version, got, c.want)
		}
	}
	for _, c := range pkgSpecifierPrereleases {
		if got := (Specifier{}).Prereleases(); got {
			t.Fatal("the zero Specifier admits pre-releases")
		}
		s, err := ParseSpecifier(c.spec)
		if err != nil {
			t.Fatalf("ParseSpecifier(%q): %v", c.spec, err)
		}
		if got := s.Prereleases(); got != c.want {
			t.Errorf("Specifier(%q).prereleases = %v, packaging 26.2 says %v", c.spec, got, c.want)
		}
	}
	for _, c := range pkgSpecifierContainsPre {
		set := MustParseSpecifierSet(c.spec) // one clause: a set of one behaves as the clause
		if got := containsDefault(set, MustParse(c.version), c.pre); got != c.want {
			t.Errorf("Specifier(%q).contains(%q, prereleases=%s) = %v, packaging 26.2 says %v", c.spec, c.version, c.pre, got, c.want)
		}
	}
}

func TestPackagingSpecifierSet(t *testing.T) {
	for _, c := range pkgSetFilter {
		set := MustParseSpecifierSet(c.spec)
		in := make([]Version, len(c.in))
		for i, s := range c.in {
			in[i] = MustParse(s)
		}
		var got []string
		for _, v := range set.Filter(in, c.pre.ptr()) {
			got = append(got, v.String())
		}
		var want []string
		for _, s := range c.want {
			want = append(want, MustParse(s).String())
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("SpecifierSet(%q).filter(%v, prereleases=%s) = %v, packaging 26.2 says %v", c.spec, c.in, c.pre, got, want)
		}
	}
	for _, c := range pkgSetContains {
		set := MustParseSpecifierSet(c.spec)
		if got := containsDefault(set, MustParse(c.version), c.pre); got != c.want {
			t.Errorf("SpecifierSet(%q).contains(%q, prereleases=%s) = %v, packaging 26.2 says %v", c.spec, c.version, c.pre, got, c.want)
		}
	}
	for _, c := range pkgSetString {
		if got := MustParseSpecifierSet(c.spec).String(); got != c.want {
			t.Errorf("str(SpecifierSet(%q)) = %q, packaging 26.2 says %q", c.spec, got, c.want)
		}
	}
}

// TestIssue13 holds the cases issue 13 measured against packaging 21.3's
// behaviour, each with what packaging 26.2 (pip 26.1-26.2) answers.
func TestIssue13(t *testing.T) {
	contains := []struct {
		spec, version string
		pre           bool
		want          bool
	}{
		{"~=2022.01.01", "2022.01.01", false, true}, // 22.0: ~= on parsed versions
		{"==0!2.*", "2", false, true},               // 24.0: epochs in prefix matching
		{"==2!1.0.0.0.*", "2!1.0.0", false, true},   // 23.1: zeros at the end of a prefix
		{"==2022.01.*", "2022.1.3", false, true},    // 22.0: the operand is normalized
		{"==01.0.*", "1.0", false, true},
		{"~=1.18,~=1.18.0", "1.19.5", false, false}, // 26.1: distinct clauses are kept
		{"~=1.18,~=1.18.0", "1.18.5", false, true},
		{">1.0.dev1", "1.0", false, true},
		{"<1.0.post1", "1.0a1", true, true}, // 26.1: narrower pre-release exclusion of <V.postN
		{"<1.0.post1", "1.0.post1.dev0", true, false},
		{">1.0a1", "1.0.post1", false, true}, // 26.1: >V excludes post-releases of V only
		{">1.0", "1.0.post1", false, false},
		{">1.0.dev1", "1.0+local", false, true}, // 26.1: > with dev and local segments
		{">1.0.dev1", "1.0.dev1+local", true, false},
		{">1.0", "1.0+local", false, false},
	}
	for _, c := range contains {
		if got := MustParseSpecifierSet(c.spec).Contains(MustParse(c.version), c.pre); got != c.want {
			t.Errorf("%q.Contains(%s, %v) = %v, want %v", c.spec, c.version, c.pre, got, c.want)
		}
	}
	if got := MustParseSpecifierSet(">1.0.dev1").Prereleases(); !got {
		t.Error(">1.0.dev1 must admit pre-releases (packaging 24.2)")
	}
	if got := MustParseSpecifierSet(">2.0a1").Filter([]Version{MustParse("2.0b1"), MustParse("1.0")}, nil); len(got) != 1 || got[0].String() != "2.0b1" {
		t.Errorf(">2.0a1 filters [2.0b1 1.0] to %v, want [2.0b1] (packaging 24.2)", got)
	}
	if got := MustParseSpecifierSet(">=1.0").Filter([]Version{MustParse("2.0a1")}, nil); len(got) != 1 {
		t.Errorf(">=1.0 filters [2.0a1] to %v, want [2.0a1] (packaging 26.0 falls back to pre-releases)", got)
	}
	if got := MustParseSpecifierSet(">=1.0").Filter([]Version{MustParse("2.0a1"), MustParse("1.5")}, nil); len(got) != 1 || got[0].String() != "1.5" {
		t.Errorf(">=1.0 filters [2.0a1 1.5] to %v, want [1.5]", got)
	}
	for _, s := range []string{"==1.0a1.*", "!=1.0.post1.*", "==1.0.dev1.*", "===x;y", "===a)"} {
		if _, err := ParseSpecifierSet(s); err == nil {
			t.Errorf("ParseSpecifierSet(%q) accepted; packaging 26.2 refuses it", s)
		}
	}
	if got := MustParseSpecifierSet("~=1.18").And(MustParseSpecifierSet("~=1.18.0")).String(); got != "~=1.18,~=1.18.0" {
		t.Errorf("And kept %q, want both clauses", got)
	}
	if got := MustParseSpecifierSet(">=1.0.0,>=1.0").String(); got != ">=1.0" {
		t.Errorf("equal clauses: %q, want the one that sorts first (>=1.0)", got)
	}
}
