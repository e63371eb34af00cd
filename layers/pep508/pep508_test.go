package pep508

import (
	"errors"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/pep440"
)

func TestNames(t *testing.T) {
	for in, want := range map[string]string{"Foo.Bar": "foo-bar", "a__b--c..d": "a-b-c-d", "A-_.B": "a-b", "x": "x"} {
		if got := NormalizeName(in); got != want {
			t.Errorf("NormalizeName(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]bool{"a": true, "a.b-c_d": true, "A1": true, "-a": false, "a-": false, "": false, "a b": false, "é": false} {
		if got := ValidName(in); got != want {
			t.Errorf("ValidName(%q) = %v", in, got)
		}
	}
}

func TestParseRequirement(t *testing.T) {
	tests := []struct {
		in, name, spec, url, marker, str string
		extras                           []string
	}{
		{"requests", "requests", "", "", "", "requests", nil},
		{"A.B [Sec_urity, socks,sec.urity] (>= 1.0 , <2) ; python_version<'3.12'", "A.B", "<2,>=1.0", "",
			`python_version < "3.12"`, `A.B[sec-urity,socks]<2,>=1.0; python_version < "3.12"`, []string{"sec-urity", "socks"}},
		{"a@ https://e.com/a.whl ; os_name=='posix'", "a", "", "https://e.com/a.whl", `os_name == "posix"`,
			`a @ https://e.com/a.whl ; os_name == "posix"`, nil},
		{"a===1.0 ; os_name=='x'", "a", "===1.0", "", `os_name == "x"`, `a===1.0; os_name == "x"`, nil},
		// packaging 26.2's parser (issue 13)
		{"pkg===x;python_version>='3.3'", "pkg", "===x", "", `python_version >= "3.3"`, `pkg===x; python_version >= "3.3"`, nil},
		{"name()", "name", "", "", "", "name", nil},
		{"name\t@\thttps://e.com/a.whl\t;\tos_name=='posix'", "name", "", "https://e.com/a.whl", `os_name == "posix"`,
			`name @ https://e.com/a.whl ; os_name == "posix"`, nil},
		{"a; extra == 'Foo_Bar'", "a", "", "", `extra == "foo-bar"`, `a; extra == "foo-bar"`, nil},
		{"a ; os_name not \t in 'posix'", "a", "", "", `os_name not in "posix"`, `a; os_name not in "posix"`, nil},
		{"a[]", "a", "", "", "", "a", nil},
		{"a==1.0.*,!=1.0.3", "a", "!=1.0.3,==1.0.*", "", "", "a!=1.0.3,==1.0.*", nil},
	}
	for _, tt := range tests {
		r, err := ParseRequirement(tt.in)
		if err != nil {
			t.Errorf("ParseRequirement(%q): %v", tt.in, err)
			continue
		}
		if r.Name != tt.name || r.Specifier.String() != tt.spec || r.URL != tt.url || r.Marker.String() != tt.marker ||
			strings.Join(r.Extras, ",") != strings.Join(tt.extras, ",") || r.String() != tt.str {
			t.Errorf("ParseRequirement(%q) = %+v %q %q", tt.in, r, r.Marker.String(), r.String())
		}
		if r2, err := ParseRequirement(r.String()); err != nil || r2.String() != r.String() {
			t.Errorf("String() %q does not round-trip: %v", r.String(), err)
		}
	}
}

func TestParseRequirementErrors(t *testing.T) {
	tests := []struct {
		in     string
		col    int
		is     error
		substr string
	}{
		{"", 1, ErrInvalidRequirement, "package name"},
		{"a b", 3, ErrInvalidRequirement, "expected"},
		{"a[x,]", 5, ErrInvalidRequirement, "extra name"},
		{"a (>=1", 7, ErrInvalidRequirement, "')'"},
		{"a >= 1.0abc", 3, pep440.ErrInvalidSpecifier, "specifier"},
		{"a~=1.0alpha1", 8, ErrInvalidRequirement, "expected"}, // as pip 23.2: the ~= token ends at "1.0a"
		{"a; foo == 'x'", 4, ErrInvalidMarker, `unknown marker variable "foo"`},
		{"a; os_name == 'x", 15, ErrInvalidMarker, "unterminated"},
		{"a @ https://e.com/a.whl; os_name=='x'", 26, ErrInvalidRequirement, "space"},
		{"a @ file:/x", 5, ErrInvalidRequirement, "file URL"},
		{"a @ /tmp/x.whl", 5, ErrInvalidRequirement, "scheme"},
		{"é", 1, ErrInvalidRequirement, "package name"},
		// packaging 26.2's parser (issue 13)
		{"a==1.0a1.*", 2, pep440.ErrInvalidSpecifier, "specifier"},
		{"a; os_name == 'x'\n", 18, ErrInvalidMarker, "expected"},
		{"a\n", 2, ErrInvalidRequirement, "expected"},
		{"a; os_name == 'x'andos_name == 'y'", 18, ErrInvalidMarker, "expected"},
	}
	for _, tt := range tests {
		_, err := ParseRequirement(tt.in)
		var se *SyntaxError
		if !errors.As(err, &se) || !errors.Is(err, tt.is) || se.Column() != tt.col || !strings.Contains(err.Error(), tt.substr) {
			t.Errorf("ParseRequirement(%q) error = %v; want %v at column %d mentioning %q", tt.in, err, tt.is, tt.col, tt.substr)
		}
	}
}

var linux311 = Environment{"python_version": "3.11", "python_full_version": "3.11.7", "os_name": "posix",
	"sys_platform": "linux", "platform_release": "6.1.0-28-amd64", "platform_system": "Linux", "platform_version": "#1",
	"platform_machine": "x86_64", "platform_python_implementation": "CPython", "implementation_name": "cpython",
	"implementation_version": "3.11.7"}

func TestMarkerEvaluate(t *testing.T) {
	tests := []struct {
		marker, extra string
		want          bool
		err           error
	}{
		{`python_version < "3.12"`, "", true, nil},
		{`python_version < "3.9"`, "", false, nil},
		{`python_version > "3.9"`, "", true, nil}, // PEP 440, not string, comparison
		{`python_version == "3.*"`, "", true, nil},
		{`"3.8" < python_version`, "", true, nil},
		{`os_name == "posix" and (sys_platform == "win32" or sys_platform == "linux")`, "", true, nil},
		{`os_name == "nt" and sys_platform == "win32" or platform_machine == "x86_64"`, "", true, nil},
		{`"lin" in sys_platform`, "", true, nil},
		{`sys_platform not in "win32 cygwin"`, "", true, nil},
		{`platform_release >= "5"`, "", false, nil},     // not PEP 440: no string fallback
		{`platform_machine >= "x86_64"`, "", true, nil}, // packaging 26.0: >= of strings is ==
		{`platform_machine > "a"`, "", false, nil},      // and > is false
		{`platform_machine != "1.0"`, "", true, nil},    // a string, not a version
		{`os_name === "posix"`, "", false, ErrUndefinedComparison},
		{`extra == "Test_Extra"`, "test.extra", true, nil},
		{`extra == "test-extra"`, "Test__Extra", true, nil},
		{`extra == "test"`, "", false, nil},
		{`python_version === "3.11"`, "", true, nil},
		{`os_name ~= "posix"`, "", false, ErrUndefinedComparison},
		{`os_name == "nt" and os_name ~= "x"`, "", false, ErrUndefinedComparison}, // no short-circuit
		{`"x" == "y"`, "", false, ErrUndefinedEnvironmentName},
	}
	for _, tt := range tests {
		m, err := ParseMarker(tt.marker)
		if err != nil {
			t.Fatalf("ParseMarker(%q): %v", tt.marker, err)
		}
		got, err := m.Eval(linux311, tt.extra)
		if got != tt.want || !errors.Is(err, tt.err) || m.Evaluate(linux311, tt.extra) != tt.want {
			t.Errorf("%q (extra %q) = %v, %v; want %v, %v", tt.marker, tt.extra, got, err, tt.want, tt.err)
		}
	}
	for _, c := range []struct {
		marker, full string
		want         bool
	}{
		{`python_full_version >= "3.8"`, "3.13.0rc1", true}, // packaging 22.0: pre-release interpreters
		{`python_full_version > "3.6.2"`, "3.11.0a5", true},
		{`python_full_version > "3.11.0"`, "3.11.1+", true}, // packaging 24.1/24.2: "+" read as "+local"
		{`python_full_version == "3.11.1"`, "3.11.1+", true},
		{`python_full_version < "3.11.1"`, "3.11.1+", false},
	} {
		env := Environment{"python_full_version": c.full}
		if got, err := MustMarker(t, c.marker).Eval(env, ""); got != c.want || err != nil {
			t.Errorf("%s with python_full_version %q = %v, %v; want %v", c.marker, c.full, got, err, c.want)
		}
	}
	var nilMarker *Marker
	if !nilMarker.Evaluate(nil, "") || nilMarker.String() != "" {
		t.Error("nil marker must be always-true and empty")
	}
}

func MustMarker(t *testing.T, s string) *Marker {
	t.Helper()
	m, err := ParseMarker(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMarkerString(t *testing.T) {
	for in, want := range map[string]string{
		`(((os_name=='nt')))`:                               `os_name == "nt"`,
		`((os_name=='a' or os_name=='b')) and os_name=='c'`: `(os_name == "a" or os_name == "b") and os_name == "c"`,
		`(os_name=='a') and os.name=='b'`:                   `os_name == "a" and os_name == "b"`,
		`os_name == 'a"b'`:                                  `os_name == 'a"b'`,
		`os_name == "a\nb\\c"`:                              `os_name == "a\nb\\c"`,
		`python_implementation=="CPython"`:                  `platform_python_implementation == "CPython"`,
	} {
		m := MustMarker(t, in)
		if m.String() != want {
			t.Errorf("ParseMarker(%q).String() = %q, want %q", in, m.String(), want)
		}
		if MustMarker(t, m.String()).String() != m.String() {
			t.Errorf("%q does not round-trip", m.String())
		}
	}
	deep := strings.Repeat("(", 100) + `os_name == "x"` + strings.Repeat(")", 100)
	if _, err := ParseMarker(deep); !errors.Is(err, ErrInvalidMarker) {
		t.Errorf("deep nesting: %v", err)
	}
}
