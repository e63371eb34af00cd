package catalog

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzLoad feeds bytes to both decoders: they never panic, and whatever
// they accept is a valid catalog that survives a round trip through JSON
// and YAML unchanged.
func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile("testdata/catalog.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(example),
		`{"base":["numpy>=2"],"allow":[{"name":"Python_Docx","spec":">=1,<3"},{"name":"six"}],"deny":["PyCrypto"],"max_wheel_bytes":10,"max_layer_bytes":20}`,
		`{}`, `{"deny":["x"],"deny":[]}`, `{"allow":[{"name":"x","name":"y"}]}`, `{"DENY":["x"]}`, `[[[[]]]]`, `{} {}`,
		"allow:\n  - name: x\n    spec: '~=1.0'\ndeny: [y]\n", "a: &a [*a]\n", "deny: [x]\n---\n", "max_wheel_bytes: 0x10\n",
		`{"allow":[{"name":"a","spec":"===1"}],"base":["a[b]>=1; python_version<'3'"]}`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		format := YAML
		if asJSON {
			format = JSON
		}
		c, err := Parse(data, format)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a catalog and an error %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted catalog fails Validate: %v", err)
		}
		j, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range []struct {
			data   []byte
			format Format
		}{{j, JSON}, {y, YAML}} {
			again, err := Parse(rt.data, rt.format)
			if err != nil {
				t.Fatalf("re-parsing %s %q: %v", rt.format, rt.data, err)
			}
			if !reflect.DeepEqual(canon(again), canon(c)) {
				t.Fatalf("%s round trip changed the catalog:\n%+v\n%+v", rt.format, again, c)
			}
		}
	})
}

// canon maps empty slices to nil, which omitempty does not keep apart.
func canon(c *Catalog) Catalog {
	out := *c
	if len(out.Base) == 0 {
		out.Base = nil
	}
	if len(out.Allow) == 0 {
		out.Allow = nil
	}
	if len(out.Deny) == 0 {
		out.Deny = nil
	}
	return out
}

// FuzzClassify checks that Classify never panics, always gives a reason,
// only marks pending decisions isolated, and never auto-approves a request
// that names a denylisted project.
func FuzzClassify(f *testing.F) {
	f.Add("six", "1.16.0", "six-1.16.0-py3-none-any.whl", int64(1), "evil", false, false)
	f.Add("evil", "1.0", "evil-1.0-py3-none-any.whl", int64(1<<30), "", true, true)
	f.Add("foo", "3.0rc1", "foo-3.0rc1-1-py3-none-any.whl", int64(0), "foo", false, true)
	f.Fuzz(func(t *testing.T, name, version, filename string, size int64, requested string, uploaded, baseConflict bool) {
		p := Package{Name: name, Version: version, Filename: filename, SHA256: "00000000000000000000000000000000000000000000000000000000000000ff", Size: size}
		r := Request{Packages: []Package{p}, Requested: []string{requested}, Uploaded: uploaded, BaseConflict: baseConflict}
		if baseConflict {
			r.ResolveErr = conflictErr("x requires y, but the base layer pins y==1")
		}
		got := testCatalog.Classify(r)
		if len(got.Reasons) == 0 {
			t.Fatalf("no reasons: %+v", got)
		}
		if got.Isolated && got.Decision != Pending {
			t.Fatalf("isolated but %s", got.Decision)
		}
		if got.Decision == AutoApproved && (testCatalog.denied(name) || uploaded || baseConflict) {
			t.Fatalf("auto-approved %+v: %+v", r, got)
		}
		if !reflect.DeepEqual(got, testCatalog.Classify(r)) {
			t.Fatal("not deterministic")
		}
	})
}
