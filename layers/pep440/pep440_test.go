package pep440

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in, want string
		pre      bool
	}{
		{"1.0", "1.0", false},
		{"v1.0", "1.0", false},
		{" 1.0\n", "1.0", false},
		{"1.0-1", "1.0.post1", false},
		{"1.0.REV2", "1.0.post2", false},
		{"1.0r", "1.0.post0", false},
		{"1.0alpha", "1.0a0", true},
		{"1.0-preview_3", "1.0rc3", true},
		{"1.0c1", "1.0rc1", true},
		{"1.0-dev", "1.0.dev0", true},
		{"1!01.02", "1!1.2", false},
		{"1.0+Ubuntu-01_x", "1.0+ubuntu.1.x", false},
		{"1.0a1.post2.dev3+l", "1.0a1.post2.dev3+l", true},
		{"0!1.0", "1.0", false},
	}
	for _, tt := range tests {
		v, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if v.String() != tt.want || v.IsPrerelease() != tt.pre {
			t.Errorf("Parse(%q) = %q pre=%v, want %q pre=%v", tt.in, v, v.IsPrerelease(), tt.want, tt.pre)
		}
	}
	for _, in := range []string{"", "1.0-", "1.0+", "foo", "1.0 a1", "1.0-dev-x", "1.0+ſ", "99999999999999999999", "1.0.x"} {
		if v, err := Parse(in); !errors.Is(err, ErrInvalidVersion) {
			t.Errorf("Parse(%q) = %v, %v; want ErrInvalidVersion", in, v, err)
		}
	}
}

func TestCompareOrder(t *testing.T) {
	// Strictly increasing, from PEP 440's examples plus local and epoch cases.
	order := []string{"1.0.dev456", "1.0a1", "1.0a2.dev456", "1.0a12.dev456", "1.0a12", "1.0b1.dev456", "1.0b2",
		"1.0b2.post345.dev456", "1.0b2.post345", "1.0rc1.dev456", "1.0rc1", "1.0", "1.0+abc.5", "1.0+abc.7",
		"1.0+5", "1.0+5.abc", "1.0+6", "1.0+00000000000000000000007", "1.0+99999999999999999999999", "1.0.post456.dev34",
		"1.0.post456", "1.0.15", "1.1.dev1", "2", "1!0.1"}
	for i := range order {
		for j := range order {
			a, b := MustParse(order[i]), MustParse(order[j])
			if got := a.Compare(b); got != cmpInt(i, j) {
				t.Errorf("Compare(%s, %s) = %d, want %d", order[i], order[j], got, cmpInt(i, j))
			}
		}
	}
	if !MustParse("1.0").Equal(MustParse("1.0.0.0")) || MustParse("1.0").Equal(MustParse("1.0+0")) {
		t.Error("trailing zeros must be equal, locals must not")
	}
}

func TestSpecifierSet(t *testing.T) {
	tests := []struct {
		set     string
		version string
		pre     bool
		want    bool
	}{
		{">=1.0", "1.0", false, true},
		{"<3.1", "3.1.dev0", true, false},   // no pre-release of the bound itself
		{"<3.1", "3.0.dev0", true, true},    // but those of earlier releases
		{"<3.1rc1", "3.1.dev0", true, true}, // unless the bound is a pre-release
		{">1.0", "1.0.post1", false, false}, // no post-release of the bound
		{">1.0.post1", "1.0.post2", false, true},
		{">1.0", "1.0+local", false, false}, // nor a local version of it
		{"<=1.0", "1.0+local", false, true},
		{"==1.0", "1.0+local", false, true},
		{"==1.0+other", "1.0+local", false, false},
		{"==1.0.*", "1.0.5+local", false, true},
		{"==1.0.*", "1.1", false, false},
		{"==01.0.*", "1.0", false, true}, // packaging 22.0+ normalizes the operand
		{"!=1.5.*", "1.5.1", false, false},
		{"~=2.2", "2.9", false, true},
		{"~=2.2", "3.0", false, false},
		{"~=2.2.0", "2.3", false, false},
		{"~=1.0a1", "1.5", false, true},
		{"===1.0", "1.0", false, true},
		{"===1.0", "1.0.0", false, false},
		{">=1.0", "2.0a1", false, false},
		{">=1.0", "2.0a1", true, true},
		{"", "2.0a1", false, false},
		{"", "2.0", false, true},
	}
	for _, tt := range tests {
		s, err := ParseSpecifierSet(tt.set)
		if err != nil {
			t.Fatalf("ParseSpecifierSet(%q): %v", tt.set, err)
		}
		if got := s.Contains(MustParse(tt.version), tt.pre); got != tt.want {
			t.Errorf("%q.Contains(%s, %v) = %v, want %v", tt.set, tt.version, tt.pre, got, tt.want)
		}
	}
}

func TestSpecifierSetParse(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{" , ", ""},
		{"<2, >= 1.0", "<2,>=1.0"},
		{">=1.0.0,>=1.0", ">=1.0"},         // duplicates by canonical form; the spelling sorting first wins
		{"~=1.0,~=1.0.0", "~=1.0,~=1.0.0"}, // distinct: a ~= operand's trailing zero matters
		{"==1.0.*,==1.0.0.*", "==1.0.*,==1.0.0.*"},
		{"=== foo", "===foo"},
		{"==v1.0RC1", "==v1.0RC1"},
	}
	for _, tt := range tests {
		s, err := ParseSpecifierSet(tt.in)
		if err != nil || s.String() != tt.want {
			t.Errorf("ParseSpecifierSet(%q) = %q, %v; want %q", tt.in, s, err, tt.want)
		}
	}
	for _, in := range []string{"~=1", "~=1.0.*", ">=1.0.*", "<=1.0+local", "=1.0", "1.0", "==1.0abc", ">=", "===",
		"=== a b", "==1.0+ſ", "=>1"} {
		if s, err := ParseSpecifierSet(in); !errors.Is(err, ErrInvalidSpecifier) && !errors.Is(err, ErrInvalidVersion) {
			t.Errorf("ParseSpecifierSet(%q) = %q, %v; want an error", in, s, err)
		}
	}
}

func TestAndFilterPinned(t *testing.T) {
	a, b := MustParseSpecifierSet(">=1.0"), MustParseSpecifierSet("<2,>=1.0.0")
	if got := a.And(b).String(); got != "<2,>=1.0" {
		t.Errorf("And = %q", got)
	}
	if !(SpecifierSet{}).And(SpecifierSet{}).IsEmpty() {
		t.Error("empty And empty is not empty")
	}
	vs := []Version{MustParse("1.0a1"), MustParse("2.0b1")}
	if got := (SpecifierSet{}).Filter(vs, nil); len(got) != 2 {
		t.Errorf("empty set must fall back to pre-releases, got %v", got)
	}
	if got := MustParseSpecifierSet(">=0.5").Filter(vs, nil); len(got) != 2 {
		t.Errorf("packaging 26.0 falls back to pre-releases for every set, got %v", got)
	}
	if got := MustParseSpecifierSet(">=1.0a1").Filter(vs, nil); len(got) != 2 {
		t.Errorf("a pre-release bound admits pre-releases, got %v", got)
	}
	for in, want := range map[string]bool{"==1.0": true, "===x": true, "==1.*": false, ">=1,==2": true, ">=1": false, "": false} {
		if got := MustParseSpecifierSet(in).IsPinned(); got != want {
			t.Errorf("IsPinned(%q) = %v", in, got)
		}
	}
	sp, err := ParseSpecifier(" >= 2.0rc1 ")
	if err != nil || sp != (Specifier{">=", "2.0rc1"}) || !sp.Prereleases() || !sp.Contains(MustParse("2.0"), false) {
		t.Errorf("ParseSpecifier: %+v %v", sp, err)
	}
}
