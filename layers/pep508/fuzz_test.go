package pep508

import (
	"regexp"
	"strings"
	"testing"
)

func FuzzParseRequirement(f *testing.F) {
	for _, s := range []string{"requests", "A.B [x, y] (>= 1.0 , <2) ; python_version<'3.12'", "a@ https://e.com/a.whl ; os_name=='posix'",
		"a===1.0 ; os_name=='x'", "a~=1.0alpha1", "a @ file:///x", "a[x,]", "a==1.0.*,!=1.0.3;extra=='t'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRequirement(s)
		if err != nil {
			return
		}
		r2, err := ParseRequirement(r.String())
		if err != nil {
			t.Fatalf("String() %q of %q does not re-parse: %v", r.String(), s, err)
		}
		if r2.String() != r.String() || r2.Key() != r.Key() {
			t.Fatalf("%q -> %q -> %q", s, r.String(), r2.String())
		}
	})
}

func FuzzParseMarker(f *testing.F) {
	for _, s := range []string{`python_version < "3.12"`, `((os_name=='a' or os_name=='b')) and os_name=='c'`,
		`os_name == 'a"b'`, `os_name == "a\nb"`, `"x" in sys_platform or extra == "t"`, `os_name == "posix"orextra == "test"`} {
		f.Add(s, "")
	}
	f.Fuzz(func(t *testing.T, s, extra string) {
		m, err := ParseMarker(s)
		if err != nil {
			return
		}
		m2, err := ParseMarker(m.String())
		if err != nil {
			t.Fatalf("String() %q of %q does not re-parse: %v", m.String(), s, err)
		}
		if m2.String() != m.String() {
			t.Fatalf("%q -> %q -> %q", s, m.String(), m2.String())
		}
		a, errA := m.Eval(linux311, extra)
		b, errB := m2.Eval(linux311, extra)
		if a != b || (errA == nil) != (errB == nil) {
			t.Fatalf("%q and its String %q evaluate differently", s, m.String())
		}
	})
}

// FuzzNormalizeName: NormalizeName is packaging's canonicalize_name as the pattern
// re.sub(r"[-_.]+", "-", name).lower() states it, on any string.
func FuzzNormalizeName(f *testing.F) {
	sep := regexp.MustCompile(`[-_.]+`)
	for _, s := range []string{"", "a", "A", "a-b", "a--b", "-a", "a-", "A_B.c", "a._-b", "zope.interface",
		"Django", "\xff_A", "É-b", "ǅ", "a\x00-b", "--", "x-y-z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := NormalizeName(s), strings.ToLower(sep.ReplaceAllString(s, "-")); got != want {
			t.Errorf("NormalizeName(%q) = %q, want %q", s, got, want)
		}
	})
}
