package resolve

import (
	"context"
	"testing"

	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/test/fixture"
)

// TestResolvePip26 holds resolutions where packaging 26.2 (pip 26.1-26.2)
// answers differently from the packaging 21.3 of pip 23.
func TestResolvePip26(t *testing.T) {
	idx := serve(t, []fixture.Wheel{
		// numpy 1.19.5 satisfies ~=1.18 but not ~=1.18.0: merging the two clauses into one
		// (packaging 21.3) pinned a version the second requirer forbids.
		w("numpy", "1.18.5"), w("numpy", "1.19.5"),
		w("lib-a", "1.0", "numpy~=1.18"), w("lib-b", "1.0", "numpy~=1.18.0"),
		// only pre-releases satisfy >=1.5: packaging 26.0 falls back to them
		w("onlypre", "1.0"), w("onlypre", "2.0b1"),
		// a pre-release operand of > admits pre-releases (packaging 24.2)
		w("gt", "1.0"), w("gt", "1.1a1"),
		// ~= and wildcards compare parsed versions
		w("cal", "2022.1.1"), w("cal", "2022.2.0"),
		{Name: "rp", Version: "1.0"}, {Name: "rp", Version: "2.0", RequiresPython: ">=3.13"},
	}, nil)
	ctx := context.Background()
	cases := []struct {
		name   string
		reqs   []string
		python string
		want   string
	}{
		{"two requirers ~=1.18 and ~=1.18.0", []string{"lib-a", "lib-b"}, "", "lib-a==1.0 lib-b==1.0 numpy==1.18.5"},
		{"the same clauses from the user", []string{"numpy~=1.18", "numpy~=1.18.0"}, "", "numpy==1.18.5"},
		{"one requirer alone", []string{"lib-a"}, "", "lib-a==1.0 numpy==1.19.5"},
		{"pre-release fallback", []string{"onlypre>=1.5"}, "", "onlypre==2.0b1"},
		{"final when one matches", []string{"onlypre>=0.5"}, "", "onlypre==1.0"},
		{"> with a pre-release operand", []string{"gt>1.0.dev0"}, "", "gt==1.1a1"},
		{"~= on parsed versions", []string{"cal~=2022.01.01"}, "", "cal==2022.1.1"},
		{"wildcard on parsed versions", []string{"cal==2022.01.*"}, "", "cal==2022.1.1"},
		{"Requires-Python on version_info[:3]", []string{"rp"}, "3.13.0rc1", "rp==2.0"},
		{"Requires-Python excludes older", []string{"rp"}, "3.12.4", "rp==1.0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := tgt(t)
			if c.python != "" {
				var err error
				if tg, err = target.FromFlags(c.python[:4], "manylinux_2_28_x86_64"); err != nil {
					t.Fatal(err)
				}
				tg.PythonFull, tg.Markers["python_full_version"] = c.python, c.python
				if err := tg.Validate(); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Resolve(ctx, idx, reqs(t, c.reqs...), Options{Target: tg})
			if err != nil {
				t.Fatal(err)
			}
			if p := pins(got); p != c.want {
				t.Fatalf("got %q, want %q", p, c.want)
			}
		})
	}
}
