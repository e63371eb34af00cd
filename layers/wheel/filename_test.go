package wheel

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseFilename(t *testing.T) {
	cases := []struct {
		in   string
		want *Filename // nil: must be rejected
	}{
		{"pip-23.0.1-py3-none-any.whl", &Filename{Name: "pip", Version: "23.0.1", Python: []string{"py3"}, ABI: []string{"none"}, Platform: []string{"any"}}},
		{"six-1.16.0-py2.py3-none-any.whl", &Filename{Name: "six", Version: "1.16.0", Python: []string{"py2", "py3"}, ABI: []string{"none"}, Platform: []string{"any"}}},
		{"numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", &Filename{Name: "numpy", Version: "1.26.4",
			Python: []string{"cp311"}, ABI: []string{"cp311"}, Platform: []string{"manylinux_2_17_x86_64", "manylinux2014_x86_64"}}},
		{"My_Pkg.x-1!2.0rc1.post2+local.7-12abc-cp39.cp310-abi3-linux_x86_64.whl", &Filename{Name: "My_Pkg.x", Version: "1!2.0rc1.post2+local.7",
			Build: "12abc", Python: []string{"cp39", "cp310"}, ABI: []string{"abi3"}, Platform: []string{"linux_x86_64"}}},
		{"x-1-1-py3-none-any.whl", &Filename{Name: "x", Version: "1", Build: "1", Python: []string{"py3"}, ABI: []string{"none"}, Platform: []string{"any"}}},
		{"", nil},
		{".whl", nil},
		{"pip-23.0.1-py3-none-any.zip", nil},
		{"pip-23.0.1-py3-none-any.WHL", nil},
		{"pip-23.0.1-py3-any.whl", nil},
		{"pip-23.0.1-1-2-py3-none-any.whl", nil},
		{"pip-23.0.1-abc-py3-none-any.whl", nil}, // build tag must start with a digit
		{"pip-23.0.1--py3-none-any.whl", nil},    // empty build tag
		{"-23.0.1-py3-none-any.whl", nil},        // empty name
		{"pip--py3-none-any.whl", nil},           // empty version
		{"pip-1-py3.-none-any.whl", nil},         // empty tag component
		{"pip-1-py3-none-.whl", nil},             // empty platform
		{"../pip-1-py3-none-any.whl", nil},       // path
		{"dir/pip-1-py3-none-any.whl", nil},      // path
		{"pip-1..0-py3-none-any.whl", nil},       // ".."
		{"pip-1-py3-none-any.whl\x00.whl", nil},  // NUL
		{"pi p-1-py3-none-any.whl", nil},         // space
		{"pip-1-py3-none-linux x86.whl", nil},    // space
		{"pïp-1-py3-none-any.whl", nil},          // non-ASCII
		{"pip-1-py3-none-any\n.whl", nil},
	}
	for _, c := range cases {
		got, err := ParseFilename(c.in)
		if c.want == nil {
			if err == nil {
				t.Errorf("ParseFilename(%q) = %+v, want error", c.in, got)
			}
			if err != nil && !errors.Is(err, ErrBadFilename) {
				t.Errorf("ParseFilename(%q) error %v is not ErrBadFilename", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseFilename(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, *c.want) {
			t.Errorf("ParseFilename(%q) = %+v, want %+v", c.in, got, *c.want)
		}
		if got.String() != c.in {
			t.Errorf("String() = %q, want %q", got.String(), c.in)
		}
	}
}

func TestTagTriplesAndProject(t *testing.T) {
	f, err := ParseFilename("Foo.Bar__baz-1-py2.py3-none-any.manylinux1_x86_64.whl")
	if err != nil {
		t.Fatal(err)
	}
	want := [][3]string{{"py2", "none", "any"}, {"py2", "none", "manylinux1_x86_64"}, {"py3", "none", "any"}, {"py3", "none", "manylinux1_x86_64"}}
	if got := f.TagTriples(); !reflect.DeepEqual(got, want) {
		t.Errorf("TagTriples = %v", got)
	}
	if f.Project() != "foo-bar-baz" {
		t.Errorf("Project = %q", f.Project())
	}
	dup, _ := ParseFilename("x-1-py3.py3-none-any.whl")
	if n := len(dup.TagTriples()); n != 1 {
		t.Errorf("duplicate tags expand to %d triples", n)
	}
}

// TestFilenameMatchesPip checks every name we accept against pip's Wheel model and
// packaging's canonicalize_name.
func TestFilenameMatchesPip(t *testing.T) {
	names := []string{
		"pip-23.0.1-py3-none-any.whl", "six-1.16.0-py2.py3-none-any.whl",
		"My_Pkg.x-1!2.0rc1.post2+local.7-12abc-cp39.cp310-abi3-linux_x86_64.whl",
		"A__b.c-1.0_beta-py3-none-any.whl", "zope.interface-6.0-cp311-cp311-macosx_10_9_universal2.whl",
		"x-1-1-py3-none-any.whl", "UPPER_Case-2-py3-none-any.whl",
	}
	py := python3(t)
	in, _ := json.Marshal(names)
	out := runPython(t, py, in, `
import json, sys
from pip._internal.models.wheel import Wheel
from pip._vendor.packaging.utils import canonicalize_name
res = []
for n in json.load(sys.stdin):
    w = Wheel(n)
    res.append([w.name, w.version, "".join(map(str, w.build_tag or ())), w.pyversions, w.abis, w.plats, canonicalize_name(w.name)])
print(json.dumps(res))
`)
	var res [][]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		f, err := ParseFilename(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		r := res[i]
		got := []any{strings.ReplaceAll(f.Name, "_", "-"), strings.ReplaceAll(f.Version, "_", "-"), f.Build, anys(f.Python), anys(f.ABI), anys(f.Platform), f.Project()}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%s: ours %v, pip %v", n, got, r)
		}
	}
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func TestIsSdistFilename(t *testing.T) {
	for in, want := range map[string]bool{
		"foo-1.0.tar.gz": true, "foo-1.0.TAR.GZ": true, "foo-1.0.tgz": true, "foo-1.0.zip": true,
		"foo-1.0.tar.bz2": true, "foo-1.0.tar.xz": true, "foo-1.0.tar": true, "foo-1.0.tbz": true,
		"foo-1.0.txz": true, "foo-1.0.tlz": true, "foo-1.0.tar.lz": true, "foo-1.0.tar.lzma": true,
		"foo-1.0-py3-none-any.whl": false, "foo-1.0.egg": false, "foo-1.0.exe": false, ".tar.gz": false,
		"dir/foo-1.0.tar.gz": false, "foo-1.0.gz": false, "": false,
	} {
		if got := IsSdistFilename(in); got != want {
			t.Errorf("IsSdistFilename(%q) = %v, want %v", in, got, want)
		}
	}
}
