package lock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/target"
)

func testTarget(t testing.TB) target.Target {
	tg, err := target.FromFlags("3.11", "manylinux_2_28_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func sample(t testing.TB) *Lock {
	return &Lock{
		Version:      FormatVersion,
		Kind:         KindBase,
		Target:       testTarget(t),
		Requirements: []string{"python-docx", "openpyxl>=3"},
		Packages: []Package{
			{Name: "openpyxl", Version: "3.0.9", Filename: "openpyxl-3.0.9-py3-none-any.whl", URL: "http://127.0.0.1:1/files/openpyxl-3.0.9-py3-none-any.whl", SHA256: strings.Repeat("a", 64), Size: 10, RequiredBy: []string{Requested}},
			{Name: "et-xmlfile", Version: "1.0.1", Filename: "et_xmlfile-1.0.1-py3-none-any.whl", URL: "http://127.0.0.1:1/files/et_xmlfile-1.0.1-py3-none-any.whl", SHA256: strings.Repeat("b", 64), Size: 20, RequiredBy: []string{"openpyxl"}},
		},
	}
}

func TestCanonicalIsStableAndKeyed(t *testing.T) {
	a, b := sample(t), sample(t)
	// Order of packages and requirements does not matter.
	b.Packages[0], b.Packages[1] = b.Packages[1], b.Packages[0]
	b.Requirements[0], b.Requirements[1] = b.Requirements[1], b.Requirements[0]
	ca, err := a.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	cb, err := b.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if string(ca) != string(cb) {
		t.Fatalf("canonical bytes differ:\n%s\n%s", ca, cb)
	}
	if !strings.HasSuffix(string(ca), "}\n") || strings.Contains(string(ca), `\u003e`) {
		t.Fatalf("canonical form should end in a newline and not escape '>':\n%s", ca)
	}
	// Parse of a reformatted lock gives the same key.
	reformatted := strings.ReplaceAll(string(ca), "\n  ", "\n\t")
	l, err := Parse([]byte(reformatted))
	if err != nil {
		t.Fatal(err)
	}
	ka, _ := a.Key()
	kl, _ := l.Key()
	if ka != kl || len(ka) != 64 {
		t.Fatalf("keys differ: %s %s", ka, kl)
	}
	// Any change of content changes the key.
	a.Packages[0].Size++
	if k2, _ := a.Key(); k2 == ka {
		t.Fatal("key did not change with content")
	}
}

func TestParseRejects(t *testing.T) {
	good, err := sample(t).Canonical()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"unknown field":    strings.Replace(string(good), `"kind"`, `"extra": 1, "kind"`, 1),
		"trailing data":    string(good) + "{}",
		"bad version":      strings.Replace(string(good), `"version": 1,`, `"version": 9,`, 1),
		"bad kind":         strings.Replace(string(good), `"kind": "base"`, `"kind": "weird"`, 1),
		"bad sha":          strings.Replace(string(good), strings.Repeat("a", 64), "abc", 1),
		"upper sha":        strings.Replace(string(good), strings.Repeat("a", 64), strings.Repeat("A", 64), 1),
		"not normalized":   strings.Replace(string(good), `"name": "et-xmlfile"`, `"name": "et_xmlfile"`, 1),
		"wrong filename":   strings.Replace(string(good), `"filename": "openpyxl-3.0.9-py3-none-any.whl"`, `"filename": "openpyxl-3.0.8-py3-none-any.whl"`, 1),
		"malformed wheel":  strings.Replace(string(good), `"filename": "openpyxl-3.0.9-py3-none-any.whl"`, `"filename": "openpyxl.whl"`, 1),
		"credentials":      strings.Replace(string(good), `http://127.0.0.1:1/files/openpyxl`, `http://u:secret@127.0.0.1:1/files/openpyxl`, 1),
		"ext without base": strings.Replace(string(good), `"kind": "base"`, `"kind": "ext"`, 1),
		"not json":         "nope",
		"empty":            "",
		"bad requirement":  strings.Replace(string(good), `"openpyxl>=3"`, `"openpyxl>>3"`, 1),
		"zero size":        strings.Replace(string(good), `"size": 10`, `"size": 0`, 1),
		"empty required_by": strings.Replace(string(good), `"required_by": [
        "(requested)"
      ]`, `"required_by": []`, 1),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if in == string(good) {
				t.Fatal("test case did not change the input")
			}
			_, err := Parse([]byte(in))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
		})
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.lock.json")
	key, err := WriteFile(p, sample(t))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := l.Key(); k != key {
		t.Fatalf("read back key %s, wrote %s", k, key)
	}
	// An invalid lock writes nothing and leaves no temp file.
	bad := sample(t)
	bad.Packages[0].SHA256 = "x"
	if _, err := WriteFile(filepath.Join(dir, "bad.json"), bad); err == nil {
		t.Fatal("invalid lock written")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory should hold only the good lock, has %v", ents)
	}
}

func FuzzParse(f *testing.F) {
	good, err := sample(f).Canonical()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Parse(b)
		if err != nil {
			return
		}
		c, err := l.Canonical()
		if err != nil {
			t.Fatalf("parsed lock does not canonicalize: %v", err)
		}
		l2, err := Parse(c)
		if err != nil {
			t.Fatalf("canonical bytes do not parse: %v", err)
		}
		c2, _ := l2.Canonical()
		if string(c) != string(c2) {
			t.Fatal("canonical form is not a fixed point")
		}
	})
}

// TestKeyIsContent: index URLs are provenance. The same wheels served from two index
// addresses have one key and one Content; anything that is the layer changes the key.
func TestKeyIsContent(t *testing.T) {
	a, b := sample(t), sample(t)
	for i := range b.Packages {
		b.Packages[i].URL = strings.Replace(b.Packages[i].URL, "127.0.0.1:1", "mirror.invalid:8443", 1)
	}
	ka, err := a.Key()
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := b.Key()
	if ka != kb {
		t.Fatalf("two index addresses give two keys: %s %s", ka, kb)
	}
	ca, _ := a.Content()
	cb, _ := b.Content()
	if string(ca) != string(cb) || strings.Contains(string(ca), "url") {
		t.Fatalf("content differs or keeps a URL:\n%s\n%s", ca, cb)
	}
	if KeyOf(ca) != ka {
		t.Fatal("Key is not KeyOf(Content)")
	}
	// The lock file keeps the URLs, and a lock read back from its content has the same key.
	if canon, _ := a.Canonical(); !strings.Contains(string(canon), a.Packages[0].URL) {
		t.Fatal("the canonical lock file lost its URLs")
	}
	back, err := Parse(ca)
	if err != nil {
		t.Fatal(err)
	}
	if kc, _ := back.Key(); kc != ka {
		t.Fatalf("content re-parsed has key %s, want %s", kc, ka)
	}
	for name, change := range map[string]func(l *Lock){
		"sha256": func(l *Lock) { l.Packages[0].SHA256 = strings.Repeat("c", 64) },
		"version": func(l *Lock) {
			l.Packages[1].Version, l.Packages[1].Filename = "1.0.2", "et_xmlfile-1.0.2-py3-none-any.whl"
		},
		"requirements": func(l *Lock) { l.Requirements = append(l.Requirements, "lxml") },
		"kind":         func(l *Lock) { l.Kind = KindIso },
		"target":       func(l *Lock) { l.Target, _ = target.FromFlags("3.12", "manylinux_2_28_x86_64") },
		"base": func(l *Lock) {
			l.Kind, l.Base = KindExt, strings.Repeat("d", 64)
		},
	} {
		c := sample(t)
		change(c)
		if k, err := c.Key(); err != nil || k == ka {
			t.Errorf("changing the %s leaves the key %s (%v)", name, k, err)
		}
	}
	// A URL with credentials is still refused.
	bad := sample(t)
	bad.Packages[0].URL = "https://u:p@host/x.whl"
	if _, err := bad.Key(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("credentials in a URL: %v", err)
	}
}
