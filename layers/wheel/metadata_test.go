package wheel

import (
	"encoding/json"
	"errors"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/test/fixture"
)

func TestParseMetadata(t *testing.T) {
	m, err := ParseMetadata([]byte("Metadata-Version: 2.1\nName: Foo-Bar\nVersion: 1.0\nRequires-Python: >=3.8\n" +
		"Requires-Dist: a>=1\nprovides-extra: x\nRequires-Dist: b ; extra == \"x\"\nSummary: s\n  continued\n\nName: body\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Metadata{Name: "Foo-Bar", Version: "1.0", RequiresPython: ">=3.8", RequiresDist: []string{"a>=1", `b ; extra == "x"`},
		ProvidesExtra: []string{"x"}, MetadataVersion: "2.1"}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got %+v\nwant %+v", m, want)
	}
	for _, bad := range []string{"", "Name: x\n", "Version: 1\n", "Name:\nVersion: 1\n", "\nName: x\nVersion: 1\n", "Name: x\nVersion: 1\xff\n"} {
		if _, err := ParseMetadata([]byte(bad)); !errors.Is(err, ErrBadMetadata) {
			t.Errorf("ParseMetadata(%q) err = %v, want ErrBadMetadata", bad, err)
		}
	}
}

// metadataCases are tricky header blocks plus random ones built from fragments.
func metadataCases() []string {
	cases := []string{
		"Name: a\nVersion: 1\n",
		"Name: a\r\nVersion: 1\r\n\r\nbody",
		"Name: a\rVersion: 1\r",
		"From someone\nName: a\nVersion: 1\n",
		"Name: a\nFrom x\nVersion: 1\n",
		"Name: a\nVersion: 1\nFrom x\n",
		" cont\nName: a\nVersion: 1\n",
		"Name:   a  \nVersion:\t1\t\n",
		"Name: a\n  b\n\tc\nVersion: 1\n",
		"Name: a\nbad line\nVersion: 1\n",
		"Name: a\nBad Header: x\nVersion: 1\n",
		": nameless\nName: a\nVersion: 1\n",
		"NAME: A\nname: b\nVersion: 1\nversion: 2\n",
		"Name: a\nVersion: 1\nRequires-Dist: x\nRequires-Dist: y\n  ; extra == 'z'\nProvides-Extra: z\n",
		"Name: é\nVersion: 1\u2028x\nSummary: \u0085\n",
		"Name: a\nVersion: 1\n \n\nRequires-Dist: not-a-header\n",
		"Name:a:b\nVersion::1\n",
		"Name: a\nVersion: 1\n\n",
		"Name: a\nVersion: 1",
		"Name: a\n\r\nVersion: 1\n",
	}
	frags := []string{"Name: n", "Version: 1.0", "Requires-Dist: r", "Provides-Extra: e", "Requires-Python: >=3",
		"Metadata-Version: 2.1", " cont", "\tcont", "From x", "garbage", "", ":x", "X-Y:", "name:lower", "Näme: x", "Name: \u2028", "Version: \x0b1"}
	ends := []string{"\n", "\r\n", "\r"}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 300; i++ {
		var b strings.Builder
		for j := r.Intn(8); j >= 0; j-- {
			b.WriteString(frags[r.Intn(len(frags))])
			b.WriteString(ends[r.Intn(len(ends))])
		}
		cases = append(cases, b.String())
	}
	return cases
}

// TestMetadataMatchesEmailParser compares ParseMetadata with Python's email.parser.
func TestMetadataMatchesEmailParser(t *testing.T) {
	cases := metadataCases()
	in, _ := json.Marshal(cases)
	out := runPython(t, python3(t), in, `
import email.parser, json, sys
res = []
for text in json.loads(sys.stdin.read()):
    m = email.parser.Parser().parsestr(text)
    res.append({"Name": m.get("Name") or "", "Version": m.get("Version") or "", "RequiresPython": m.get("Requires-Python") or "",
                "MetadataVersion": m.get("Metadata-Version") or "", "RequiresDist": m.get_all("Requires-Dist") or [],
                "ProvidesExtra": m.get_all("Provides-Extra") or []})
print(json.dumps(res))
`)
	var want []Metadata
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		w := want[i]
		got, err := ParseMetadata([]byte(c))
		if w.Name == "" || w.Version == "" {
			if !errors.Is(err, ErrBadMetadata) {
				t.Errorf("%q: err = %v, want ErrBadMetadata (python: %+v)", c, err, w)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c, err)
			continue
		}
		if w.RequiresDist == nil {
			w.RequiresDist = nil
		}
		if len(w.RequiresDist) == 0 {
			w.RequiresDist = nil
		}
		if len(w.ProvidesExtra) == 0 {
			w.ProvidesExtra = nil
		}
		if !reflect.DeepEqual(*got, w) {
			t.Errorf("%q:\nours   %+v\npython %+v", c, *got, w)
		}
	}
}

func TestReadMetadata(t *testing.T) {
	w := fixture.Wheel{Name: "Read.Me", Version: "2.0", RequiresDist: []string{"x"}, RequiresPython: ">=3.9"}
	m, raw, err := ReadMetadata(writeWheel(t, w))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "Read.Me" || m.Version != "2.0" || m.RequiresPython != ">=3.9" || string(raw) != string(w.Metadata()) {
		t.Errorf("got %+v %q", m, raw)
	}
	two := writeZip(t, "x-1-py3-none-any.whl", []fixture.File{{Path: "a-1.dist-info/METADATA", Data: w.Metadata()}, {Path: "b-1.dist-info/METADATA", Data: w.Metadata()}})
	none := writeZip(t, "x-1-py3-none-any.whl", []fixture.File{{Path: "a/METADATA", Data: w.Metadata()}})
	nometa := writeZip(t, "x-1-py3-none-any.whl", []fixture.File{{Path: "a-1.dist-info/RECORD", Data: nil}})
	for _, p := range []string{two, none, nometa} {
		if _, _, err := ReadMetadata(p); !errors.Is(err, ErrBadWheel) {
			t.Errorf("%v: err = %v, want ErrBadWheel", p, err)
		}
	}
}
