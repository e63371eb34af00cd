package index

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const secretPass, secretToken = "s3cr3t-pass", "t0ken-xyz"

// authServer records the Authorization header of every request by path and
// serves one project page whose wheel lives on fileHost.
type authServer struct {
	mu   sync.Mutex
	seen map[string]string
}

func (a *authServer) record(r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string]string{}
	}
	a.seen[r.Host+r.URL.Path] = r.Header.Get("Authorization")
}

func (a *authServer) get(key string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.seen[key]
	return v, ok
}

func TestAuth(t *testing.T) {
	rec := &authServer{}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		w.Write([]byte("wheel"))
	}))
	defer other.Close()
	var index *httptest.Server
	index = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		switch r.URL.Path {
		case "/simple/demo/":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<a href="/f/demo-1.0.tar.gz">a</a><a href="` + other.URL + `/f/demo-2.0.tar.gz">b</a>`))
		case "/simple/moved/":
			http.Redirect(w, r, other.URL+"/simple/moved/", http.StatusFound)
		case "/simple/here/":
			http.Redirect(w, r, "/simple/demo/", http.StatusFound)
		default:
			w.Write([]byte("x"))
		}
	}))
	defer index.Close()
	host := strings.TrimPrefix(index.URL, "http://")
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+secretPass))
	netrc := filepath.Join(t.TempDir(), "netrc")

	tests := []struct {
		name, url, netrc, want string
	}{
		{"url basic", "http://alice:" + secretPass + "@" + host + "/simple", "", basic},
		{"url bearer", "http://:" + secretToken + "@" + host + "/simple", "", "Bearer " + secretToken},
		{"netrc basic", index.URL + "/simple", "machine 127.0.0.1 login alice password " + secretPass + "\n", basic},
		{"netrc bearer", index.URL + "/simple", "machine 127.0.0.1\n  login bearer\n  password " + secretToken + "\n", "Bearer " + secretToken},
		{"netrc default", index.URL + "/simple", "machine other.example login bob password x\ndefault login alice password " + secretPass + "\n", basic},
		{"url user, netrc password", "http://alice@" + host + "/simple", "machine 127.0.0.1 login alice password " + secretPass + "\n", basic},
		{"url beats netrc", "http://:" + secretToken + "@" + host + "/simple", "machine 127.0.0.1 login alice password " + secretPass + "\n", "Bearer " + secretToken},
		{"no credentials", index.URL + "/simple", "machine other.example login a password b\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec.mu.Lock()
			rec.seen = nil
			rec.mu.Unlock()
			if err := os.WriteFile(netrc, []byte(tc.netrc), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := New(tc.url, WithNetrc(netrc))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(c.Redacted(), secretPass) || strings.Contains(c.Redacted(), secretToken) || strings.Contains(c.Redacted(), "@") {
				t.Errorf("Redacted() = %q", c.Redacted())
			}
			ctx := context.Background()
			files, err := c.Files(ctx, "demo")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if strings.Contains(f.URL, "@") {
					t.Errorf("File.URL %q carries userinfo", f.URL)
				}
				c.Metadata(ctx, File{Filename: f.Filename, URL: f.URL, HasMetadata: true}) // fetches f.URL + ".metadata"
			}
			c.Files(ctx, "moved") // redirect to the other host
			c.Files(ctx, "here")  // redirect within the index host
			check := func(key, want string) {
				t.Helper()
				got, ok := rec.get(key)
				if !ok {
					t.Errorf("%s: not requested", key)
				} else if got != want {
					t.Errorf("%s: Authorization %q, want %q", key, got, want)
				}
			}
			oh := strings.TrimPrefix(other.URL, "http://")
			check(host+"/simple/demo/", tc.want)
			check(host+"/simple/here/", tc.want)
			check(host+"/f/demo-1.0.tar.gz.metadata", tc.want)
			check(oh+"/f/demo-2.0.tar.gz.metadata", "")
			check(oh+"/simple/moved/", "")
		})
	}
}

func TestNetrcParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     []netrcEntry
		wantErr  string
	}{
		{"one line", "machine h login u password p", []netrcEntry{{"h", "u", "p"}}, ""},
		{"multi line, comments, account", "# c\nmachine h\n  login u\n  account a\n  password p\n\ndefault login d password q\n",
			[]netrcEntry{{"h", "u", "p"}, {"", "d", "q"}}, ""},
		{"quoted", `machine h login "u x" password "p\"q"`, []netrcEntry{{"h", "u x", `p"q`}}, ""},
		{"macdef skipped", "machine h login u password p\nmacdef init\ncd /\nmachine evil\n\nmachine g login v password w\n",
			[]netrcEntry{{"h", "u", "p"}, {"g", "v", "w"}}, ""},
		{"missing value", "machine h login", nil, `"login" needs a value`},
		{"outside entry", "login u", nil, "outside a machine"},
		{"unexpected token not echoed", "machine h login u password p " + secretPass + "\n", nil, "line 1: unexpected token"},
		{"unterminated quote", `machine h password "abc`, nil, "unterminated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNetrc([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), secretPass) {
					t.Fatalf("error leaks a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("entry %d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	if _, err := New("http://h/simple", WithNetrc(filepath.Join(t.TempDir(), "missing"))); err == nil {
		t.Error("an explicit missing netrc must be an error")
	}
	t.Setenv("NETRC", filepath.Join(t.TempDir(), "missing"))
	if _, err := New("http://h/simple"); err != nil {
		t.Errorf("a missing default netrc must not be an error: %v", err)
	}
}

func TestOrigin(t *testing.T) {
	same := [][2]string{{"https://H.example/x", "https://h.example:443/y"}, {"http://h", "http://h:80"}}
	diff := [][2]string{{"https://h", "http://h"}, {"https://h", "https://h:8443"}, {"https://h", "https://sub.h"}}
	parse := func(s string) string { c, _ := New(s, WithNetrc("")); return origin(c.base) }
	for _, p := range same {
		if parse(p[0]) != parse(p[1]) {
			t.Errorf("%s and %s should be the same origin", p[0], p[1])
		}
	}
	for _, p := range diff {
		if parse(p[0]) == parse(p[1]) {
			t.Errorf("%s and %s should differ", p[0], p[1])
		}
	}
}
