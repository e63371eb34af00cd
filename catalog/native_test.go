package catalog

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/native"
)

// TestClassifyNative: a wheel that needs libraries a session lacks is rejected, naming
// the wheel, the sonames and the policy, when the catalog says native: refuse; it is
// auto-approved as before by default and with native: warn; a wheel with nothing
// missing is never refused.
func TestClassifyNative(t *testing.T) {
	needy := pkg("numpy", "2.1.0", mib)
	needy.Filename = "numpy-2.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
	needy.Native = &native.Report{Platform: "manylinux_2_28_x86_64", Missing: []native.Missing{
		{Soname: "libblas.so.3", Files: []string{"site-packages/numpy/core/_multiarray_umath.so"}},
		{Soname: "liblapack.so.3", Files: []string{"site-packages/numpy/linalg/_umath_linalg.so"}},
	}}
	clean := pkg("six", "1.16.0", mib)
	clean.Native = &native.Report{Platform: "manylinux_2_28_x86_64"}
	req := Request{Packages: []Package{needy, clean}}
	for _, policy := range []string{"", NativeWarn} {
		c := *testCatalog
		c.Native = policy
		if got := c.Classify(req); got.Decision != AutoApproved {
			t.Errorf("native %q: %+v, want auto-approved", policy, got)
		}
	}
	c := *testCatalog
	c.Native = NativeRefuse
	got := c.Classify(req)
	want := []string{"numpy-2.1.0-cp311-cp311-manylinux_2_28_x86_64.whl needs libblas.so.3 (by site-packages/numpy/core/_multiarray_umath.so), liblapack.so.3 (by site-packages/numpy/linalg/_umath_linalg.so), which are neither in the wheel nor on the manylinux_2_28 allow-list"}
	if got.Decision != Rejected || !reflect.DeepEqual(got.Reasons, want) {
		t.Errorf("native refuse: %+v, want rejected with %q", got, want)
	}
	if got := c.Classify(Request{Packages: []Package{clean}}); got.Decision != AutoApproved {
		t.Errorf("native refuse, nothing missing: %+v, want auto-approved", got)
	}
}

func TestLoadNative(t *testing.T) {
	for _, c := range []struct {
		data string
		f    Format
		want string
		err  string
	}{
		{`{"native":"refuse"}`, JSON, NativeRefuse, ""},
		{"native: warn\n", YAML, NativeWarn, ""},
		{`{}`, JSON, "", ""},
		{`{"native":"deny"}`, JSON, "", `native: "deny" is not a policy`},
		{`{"Native":"refuse"}`, JSON, "", "Native"},
	} {
		got, err := Parse([]byte(c.data), c.f)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse(%s): %v, want an error with %q", c.data, err, c.err)
			}
		case err != nil:
			t.Errorf("Parse(%s): %v", c.data, err)
		case got.Native != c.want || got.RefusesNative() != (c.want == NativeRefuse):
			t.Errorf("Parse(%s).Native = %q, want %q", c.data, got.Native, c.want)
		}
	}
}
