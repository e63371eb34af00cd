package index

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func fuzzPage() *url.URL {
	u, _ := url.Parse("https://index.example/simple/demo/")
	return u
}

// checkFiles asserts the invariants every parsed File must hold.
func checkFiles(t *testing.T, files []File) {
	for _, f := range files {
		u, err := url.Parse(f.URL)
		if err != nil {
			t.Fatalf("unparsable URL %q: %v", f.URL, err)
		}
		if u.User != nil || u.Fragment != "" || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			t.Fatalf("bad URL %q", f.URL)
		}
		if !safeFilename(f.Filename) || !belongsTo(f.Filename, "demo") || f.Project != "demo" {
			t.Fatalf("bad filename %q", f.Filename)
		}
		if f.Size < 0 {
			t.Fatalf("negative size")
		}
	}
}

func FuzzParseHTML(f *testing.F) {
	for _, p := range oraclePages {
		if p.ct != mediaJSON {
			f.Add([]byte(p.body))
		}
	}
	for _, s := range []string{
		"", "<", "<a", "<a href", "<a href=", `<a href="`, "<!--", "<script>", "<a href=demo-1.0.tar.gz data-yanked>",
		`<base href="//x/"><a href="demo-1.tar.gz">`, "<a\x00href=demo-1.zip>", "<a href='demo-1.0.zip#sha256=&sha256=x'>",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFiles(t, parseHTML(fuzzPage(), "demo", body))
	})
}

func FuzzParseJSON(f *testing.F) {
	for _, p := range oraclePages {
		if p.ct == mediaJSON {
			f.Add([]byte(p.body))
		}
	}
	for _, s := range []string{
		"", "{}", "null", `{"files":null}`, `{"files":[null]}`, `{"files":[{"url":null}]}`,
		`{"files":[{"url":"demo-1.0.zip","yanked":{"a":1},"core-metadata":[]}]}`,
		`{"meta":{"api-version":1}}`, `{"files":[{"url":"demo-1.0.zip","hashes":{"sha256":5}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		files, err := parseJSON(fuzzPage(), "demo", body)
		if err != nil {
			if files != nil {
				t.Fatal("files with an error")
			}
			return
		}
		checkFiles(t, files)
	})
}

func FuzzParseNetrc(f *testing.F) {
	for _, s := range []string{
		"machine h login u password p", "default login a password b", "macdef x\nfoo\n\nmachine h",
		`machine "a b" password "c\"d`, "# comment\nmachine h", "login", "machine",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		const secret = "ZZSECRETZZ"
		_, err := parseNetrc([]byte(in + " password " + secret + " bogus"))
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("error leaks the password: %v", err)
		}
	})
}

func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{"", acceptHeader, "*/*", "text/html;q=0.5", "a/b;q=2", ";;,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		got := negotiate(accept, true)
		if got != "" && got != mediaJSON && got != mediaHTML && got != mediaTextHTML {
			t.Fatalf("negotiate(%q) = %q", accept, got)
		}
		if got := negotiate(accept, false); got == mediaJSON {
			t.Fatal("JSON when disabled")
		}
	})
}

func FuzzRequiresPython(f *testing.F) {
	f.Add([]byte("Name: x\nRequires-Python: >=3.8\n\n"))
	f.Fuzz(func(t *testing.T, md []byte) {
		rp := requiresPython(md)
		if utf8.Valid(md) && !utf8.ValidString(rp) {
			t.Fatal("invalid UTF-8 from valid input")
		}
	})
}
