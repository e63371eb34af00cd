package index

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// TestParseHTMLFixtures covers what pip does not decide for us: filtering of
// unsafe or foreign links and the PEP 592 reading of a bare data-yanked.
func TestParseHTMLFixtures(t *testing.T) {
	page, _ := url.Parse("https://user:pw@index.example/simple/demo/")
	tests := []struct {
		name, body string
		want       []File
	}{
		{"bare data-yanked is yanked", `<a href="demo-1.0.tar.gz" data-yanked>x</a>`,
			[]File{{Project: "demo", Filename: "demo-1.0.tar.gz", URL: "https://index.example/simple/demo/demo-1.0.tar.gz", Yanked: true}}},
		{"sha256 wins over md5 and is lower-cased", `<a href="demo-1.0.tar.gz#md5=00&sha256=` + strings.ToUpper(hexA) + `">x</a>`,
			[]File{{Project: "demo", Filename: "demo-1.0.tar.gz", URL: "https://index.example/simple/demo/demo-1.0.tar.gz", SHA256: hexA}}},
		{"credentials in href and page are dropped", `<a href="https://u:secret@cdn.example/demo-1.0.tar.gz">x</a>`,
			[]File{{Project: "demo", Filename: "demo-1.0.tar.gz", URL: "https://cdn.example/demo-1.0.tar.gz"}}},
		{"non-http schemes dropped", `<a href="file:///etc/demo-1.0.tar.gz">x</a><a href="ftp://h/demo-1.0.tar.gz">y</a><a href="javascript:demo-1.0.tar.gz">z</a>`, nil},
		{"foreign wheel dropped", `<a href="other-1.0-py3-none-any.whl">x</a><a href="demox-1.0.tar.gz">y</a><a href="demo-1.0-py3.whl">bad wheel name</a>`, nil},
		{"no filename dropped", `<a href="https://cdn.example/">x</a><a href="..">y</a><a href="demo-1..0.tar.gz">z</a>`, nil},
		{"escaped slash stays a path", `<a href="x%2F..%2Fdemo-1.0.tar.gz">x</a>`,
			[]File{{Project: "demo", Filename: "demo-1.0.tar.gz", URL: "https://index.example/simple/demo/x%2F..%2Fdemo-1.0.tar.gz"}}},
		{"metadata true", `<a href="demo-1.0.tar.gz" data-dist-info-metadata="true">x</a>`,
			[]File{{Project: "demo", Filename: "demo-1.0.tar.gz", URL: "https://index.example/simple/demo/demo-1.0.tar.gz", HasMetadata: true}}},
		{"unterminated tag", `<a href="demo-1.0.tar.gz`, nil},
		{"empty", ``, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parseHTML(page, "demo", []byte(tc.body))
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseJSONFixtures(t *testing.T) {
	page, _ := url.Parse("https://index.example/simple/demo/")
	tests := []struct {
		name, body string
		want       []File
		wantErr    string
	}{
		{"empty reason string is yanked", `{"files":[{"url":"demo-1.0.tar.gz","yanked":""}]}`,
			[]File{{Project: "demo", Filename: "demo-1.0.tar.gz", URL: "https://index.example/simple/demo/demo-1.0.tar.gz", Yanked: true}}, ""},
		{"size and hashes", `{"meta":{"api-version":"1.1"},"files":[{"url":"demo-1.0.tar.gz","size":12,"hashes":{"sha256":"` + hexA + `"}}]}`,
			[]File{{Project: "demo", Filename: "demo-1.0.tar.gz", URL: "https://index.example/simple/demo/demo-1.0.tar.gz", SHA256: hexA, Size: 12}}, ""},
		{"url missing skipped", `{"files":[{"filename":"demo-1.0.tar.gz"}]}`, nil, ""},
		{"api version 2", `{"meta":{"api-version":"2.0"},"files":[]}`, nil, "unsupported simple API version"},
		{"bad yanked", `{"files":[{"url":"demo-1.0.tar.gz","yanked":1}]}`, nil, "files[0].yanked"},
		{"bad metadata", `{"files":[{"url":"demo-1.0.tar.gz","core-metadata":"yes"}]}`, nil, "files[0].core-metadata"},
		{"negative size", `{"files":[{"url":"demo-1.0.tar.gz","size":-1}]}`, nil, "negative size"},
		{"not json", `<html>`, nil, "decoding JSON"},
		{"files not a list", `{"files":{}}`, nil, "decoding JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseJSON(page, "demo", []byte(tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRequiresPython(t *testing.T) {
	tests := []struct{ md, want string }{
		{"Name: x\nRequires-Python: >=3.8\n\nbody Requires-Python: no", ">=3.8"},
		{"Name: x\r\nrequires-python:   >=3.9,\r\n  <4\r\n\r\n", ">=3.9, <4"},
		{"Name: x\n\nRequires-Python: >=3.8\n", ""},
		{"Requires-Python: >=2\nRequires-Python: >=3\n", ">=2"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := requiresPython([]byte(tc.md)); got != tc.want {
			t.Errorf("requiresPython(%q) = %q, want %q", tc.md, got, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	norm := map[string]string{"Foo_Bar": "foo-bar", "a.-_b": "a-b", "X": "x", "zope.interface": "zope-interface"}
	for in, want := range norm {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q", in, got)
		}
	}
	for _, n := range []string{"", "-a", "a-", "a/b", "../x", "a b", "a\x00", strings.Repeat("a", 201)} {
		if ValidName(n) {
			t.Errorf("ValidName(%q) = true", n)
		}
	}
	dists := []struct {
		fn, project, version string
		kind                 distKind
	}{
		{"Foo_Bar-1.0-py3-none-any.whl", "foo-bar", "1.0", kindWheel},
		{"foo-1.0-1-cp311-cp311-manylinux_2_28_x86_64.whl", "foo", "1.0", kindWheel},
		{"foo-bar-2.0.tar.gz", "foo-bar", "2.0", kindSdist},
		{"foo-2.0.zip", "foo", "2.0", kindSdist},
		{"foo-1.0-py3.whl", "", "", kindNone},
		{"foo.tar.gz", "", "", kindNone},
		{"foo-.tar.gz", "", "", kindNone},
		{"foo-1.0.exe", "", "", kindNone},
	}
	for _, d := range dists {
		p, v, k, ok := parseDistFilename(d.fn)
		if p != d.project || v != d.version || k != d.kind || ok != (d.kind != kindNone) {
			t.Errorf("parseDistFilename(%q) = %q %q %v %v", d.fn, p, v, k, ok)
		}
	}
}
