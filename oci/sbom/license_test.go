package sbom

import (
	"strings"
	"testing"
)

func TestParseExpression(t *testing.T) {
	for _, c := range []struct {
		in, want string // want "" when it is no expression
		listed   bool
	}{
		{"MIT", "MIT", true},
		{"mit", "MIT", true},
		{"apache-2.0 OR mit", "Apache-2.0 OR MIT", true},
		{"MIT and BSD-3-Clause or ISC", "MIT AND BSD-3-Clause OR ISC", true},
		{"(MIT OR Apache-2.0) AND BSD-2-Clause", "(MIT OR Apache-2.0) AND BSD-2-Clause", true},
		{"  GPL-2.0-or-later   WITH  classpath-exception-2.0 ", "GPL-2.0-or-later WITH Classpath-exception-2.0", true},
		{"GPL-2.0+", "GPL-2.0+", true},
		{"LGPL-2.1-only+", "LGPL-2.1-only+", true},
		{"LicenseRef-Proprietary", "LicenseRef-Proprietary", false},
		{"DocumentRef-spdx-tool-1.2:LicenseRef-MIT-Style-2", "DocumentRef-spdx-tool-1.2:LicenseRef-MIT-Style-2", false},
		{"BSD", "BSD", false},
		{"MIT WITH Foo-exception", "MIT WITH Foo-exception", false},
		{"MIT License", "", false},
		{"Apache 2.0", "", false},
		{"BSD-3-Clause, MIT", "", false},
		{"MIT OR", "", false},
		{"(MIT", "", false},
		{"MIT)", "", false},
		{"()", "", false},
		{"AND", "", false},
		{"MIT WITH", "", false},
		{"MIT WITH (X)", "", false},
		{"LicenseRef-", "", false},
		{"Doc:LicenseRef-x", "", false},
		{"MIT+extra+", "", false},
		{"", "", false},
		{strings.Repeat("(", 17) + "MIT" + strings.Repeat(")", 17), "", false},
		{strings.Repeat("(", 16) + "MIT" + strings.Repeat(")", 16), strings.Repeat("(", 16) + "MIT" + strings.Repeat(")", 16), true},
	} {
		e, ok := parseExpression(c.in)
		if ok != (c.want != "") || e.text != c.want {
			t.Errorf("parseExpression(%q) = %q, %v; want %q", c.in, e.text, ok, c.want)
			continue
		}
		if ok && e.listed() != c.listed {
			t.Errorf("parseExpression(%q).listed() = %v, want %v", c.in, e.listed(), c.listed)
		}
	}
}

func TestDeclaredLicense(t *testing.T) {
	for _, c := range []struct {
		name, metadata, want, text string // text: the extracted text of the LicenseRef want names
	}{
		{"expression first", "License-Expression: MIT\nLicense: GPL-3.0-only\nClassifier: License :: OSI Approved :: ISC License (ISCL)\n", "MIT", ""},
		{"expression with a ref", "License-Expression: LicenseRef-Custom OR MIT\nLicense-File: LICENSE.txt\n", "LicenseRef-Custom OR MIT",
			"The wheel's METADATA names this license in its License-Expression; its text is in the wheel's license files: LICENSE.txt."},
		{"bad expression is kept", "License-Expression: MIT/X11\n", "LicenseRef-pylayer-MIT-X11", "MIT/X11"},
		{"license field", "License: Apache-2.0\nClassifier: License :: OSI Approved :: MIT License\n", "Apache-2.0", ""},
		{"license field name", "License: Apache License 2.0\n", "Apache-2.0", ""},
		{"license field text", "License: BSD\n", "LicenseRef-pylayer-BSD", "BSD"},
		{"UNKNOWN falls through", "License: UNKNOWN\nClassifier: License :: OSI Approved :: MIT License\n", "MIT", ""},
		{"empty falls through", "License: \nClassifier: License :: OSI Approved :: Apache Software License\n",
			"LicenseRef-pylayer-License-OSI-Approved-Apache-Software-License", "License :: OSI Approved :: Apache Software License"},
		{"OSI Approved alone", "Classifier: License :: OSI Approved\n", "LicenseRef-pylayer-License-OSI-Approved", "License :: OSI Approved"},
		{"classifiers deduplicated", "Classifier: License :: OSI Approved :: MIT License\nClassifier: License :: OSI Approved :: MIT License\nClassifier: License :: OSI Approved :: Python Software Foundation License\n", "MIT AND PSF-2.0", ""},
		{"other classifiers ignored", "Classifier: Programming Language :: Python\nClassifier: Licenses :: none\n", "NOASSERTION", ""},
		{"nothing", "Name: x\n", "NOASSERTION", ""},
		{"a long text is named by its hash", "License: " + strings.Repeat("word ", 20) + "\n", "LicenseRef-pylayer-sha256-", strings.TrimSpace(strings.Repeat("word ", 20))},
		{"field names ignore case", "license-expression: 0bsd\n", "0BSD", ""},
	} {
		refs := newLicenseRefs()
		got := declaredLicense(parseMetadata([]byte(c.metadata)), "x 1.0", refs)
		if prefix := strings.HasSuffix(c.want, "-"); prefix && !strings.HasPrefix(got.expr, c.want) || !prefix && got.expr != c.want {
			t.Errorf("%s: %q, want %q", c.name, got.expr, c.want)
		}
		if got.comment == "" {
			t.Errorf("%s: no comment", c.name)
		}
		if c.text != "" {
			var id string
			for _, tok := range strings.Fields(got.expr) {
				if strings.HasPrefix(tok, "LicenseRef-") {
					id = tok
				}
			}
			if refs.text[id] != c.text {
				t.Errorf("%s: %s has text %q, want %q", c.name, id, refs.text[id], c.text)
			}
		}
	}
}

// TestLicenseRefsOneIDPerText: one text one id, two texts two ids, even when their short
// names are the same.
func TestLicenseRefsOneIDPerText(t *testing.T) {
	r := newLicenseRefs()
	a, b, c := r.add("BSD License", ""), r.add("BSD License", ""), r.add("BSD-License", "")
	if a != b || a == c || a != "LicenseRef-pylayer-BSD-License" || !strings.HasPrefix(c, "LicenseRef-pylayer-sha256-") {
		t.Fatalf("ids %q %q %q", a, b, c)
	}
	if got := r.add("!!!", ""); !strings.HasPrefix(got, "LicenseRef-pylayer-sha256-") {
		t.Fatalf("a text with no name characters got %q", got)
	}
	if l := r.list(); len(l) != 3 || l[0].LicenseID > l[1].LicenseID {
		t.Fatalf("list %v, want 3 sorted", l)
	}
}

func TestParseMetadata(t *testing.T) {
	m := parseMetadata([]byte("Metadata-Version: 2.1\r\nName:  spaced  \r\nLicense: line one\r\n        line two\r\n       |\r\n\tline four\r\nClassifier: A\r\nClassifier: B\r\n\r\nLicense: in the body\r\n"))
	if got := m.get("license"); got != "line one\nline two\n\nline four" {
		t.Errorf("License = %q", got)
	}
	if got := m.get("Name"); got != "spaced" {
		t.Errorf("Name = %q", got)
	}
	if got := m.all("Classifier"); strings.Join(got, ",") != "A,B" {
		t.Errorf("Classifier = %q", got)
	}
	if got := len(m.all("License")); got != 1 {
		t.Errorf("%d License fields, want the header's only", got)
	}
	if m := parseMetadata([]byte("Name: a\nnot a header\nLicense: MIT\n")); m.get("License") != "" {
		t.Error("a line that is no field did not end the headers")
	}
	if m := parseMetadata([]byte("License: \xff\n")); m.get("License") != "\uFFFD" {
		t.Errorf("invalid UTF-8 gave %q", m.get("License"))
	}
}

func TestIsMetadataPath(t *testing.T) {
	for p, want := range map[string]bool{
		"site-packages/six-1.16.0.dist-info/METADATA":      true,
		"site-packages/six-1.16.0.dist-info/METADATA.bak":  false,
		"site-packages/six/METADATA":                       false,
		"site-packages/x/six-1.16.0.dist-info/METADATA":    false,
		"data/six-1.16.0.dist-info/METADATA":               false,
		"site-packages/six-1.16.0.dist-info/sub/METADATA":  false,
		"site-packages/six-1.16.0.dist-info/licenses/META": false,
	} {
		if isMetadataPath(p) != want {
			t.Errorf("isMetadataPath(%q) = %v", p, !want)
		}
	}
}

func FuzzParseExpression(f *testing.F) {
	for _, s := range []string{"MIT", "(MIT OR Apache-2.0) AND BSD-3-Clause", "GPL-2.0+ WITH Classpath-exception-2.0", "DocumentRef-a:LicenseRef-b", "((((", "MIT OR OR"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, ok := parseExpression(s)
		if !ok {
			return
		}
		again, ok := parseExpression(e.text)
		if !ok || again.text != e.text {
			t.Fatalf("%q normalized to %q, which parses to %q (%v)", s, e.text, again.text, ok)
		}
		for _, id := range e.ids {
			if _, ok := licenseID(id); !ok {
				t.Fatalf("%q: id %q", s, id)
			}
		}
	})
}

func FuzzDeclaredLicense(f *testing.F) {
	f.Add([]byte("License-Expression: MIT\nLicense: x\nClassifier: License :: OSI Approved :: MIT License\n"))
	f.Add([]byte("License: a\n       |\n        b\r\n\r\nbody"))
	f.Fuzz(func(t *testing.T, b []byte) {
		refs := newLicenseRefs()
		got := declaredLicense(parseMetadata(b), "x 1.0", refs)
		if got.expr == "" {
			t.Fatal("empty declared license")
		}
		if got.expr == NoAssertion {
			return
		}
		e, ok := parseExpression(got.expr)
		if !ok {
			t.Fatalf("declared %q is no SPDX expression", got.expr)
		}
		for _, id := range e.ids {
			if _, ok := refs.text[id]; strings.HasPrefix(id, "LicenseRef-") && !ok {
				t.Fatalf("%q declares %s, which is not defined", b, id)
			}
		}
	})
}
