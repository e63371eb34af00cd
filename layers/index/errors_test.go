package index

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorPaths drives every error path we create with credentials in the
// index URL and checks the error: its sentinel, its message and that no
// secret appears in it. Downloads must leave no file behind.
func TestErrorPaths(t *testing.T) {
	body := []byte("the real bytes")
	sum := sha256Hex(body)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/gone/":
			http.NotFound(w, r)
		case "/simple/boom/":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "/simple/denied/":
			http.Error(w, "no", http.StatusUnauthorized)
		case "/simple/plain/":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("hello"))
		case "/simple/badjson/":
			w.Header().Set("Content-Type", mediaJSON)
			w.Write([]byte(`{"files": [`))
		case "/simple/huge/":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(strings.Repeat("x", 2048)))
		case "/simple/loop/":
			http.Redirect(w, r, "/simple/loop/", http.StatusFound)
		case "/simple/leaky/":
			http.Redirect(w, r, "http://u:"+secretPass+"@127.0.0.1:1/x", http.StatusFound)
		case "/f/demo-1.0.tar.gz", "/f/demo-1.0.tar.gz.metadata":
			w.Write(body)
		default:
			http.NotFound(w, r)
		}
	}))
	defer ts.Close()
	host := strings.TrimPrefix(ts.URL, "http://")
	c, err := New("http://alice:"+secretPass+"@"+host+"/simple", WithNetrc(""), WithMaxBodyBytes(1024))
	if err != nil {
		t.Fatal(err)
	}
	// a port that refuses connections
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := l.Addr().String()
	l.Close()
	dead, err := New("http://alice:"+secretPass+"@"+deadAddr+"/simple", WithNetrc(""))
	if err != nil {
		t.Fatal(err)
	}
	ok := File{Project: "demo", Filename: "demo-1.0.tar.gz", URL: ts.URL + "/f/demo-1.0.tar.gz", SHA256: sum}
	ctx := context.Background()
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.tar.gz")
	mod := func(f func(*File)) File { g := ok; f(&g); return g }
	tests := []struct {
		name     string
		run      func() error
		sentinel error
		contains string
	}{
		{"404", func() error { _, err := c.Files(ctx, "gone"); return err }, ErrNotFound, "gone"},
		{"500", func() error { _, err := c.Files(ctx, "boom"); return err }, nil, "500"},
		{"401", func() error { _, err := c.Files(ctx, "denied"); return err }, nil, "check the index credentials"},
		{"content type", func() error { _, err := c.Files(ctx, "plain"); return err }, nil, `Content-Type "text/plain"`},
		{"bad json", func() error { _, err := c.Files(ctx, "badjson"); return err }, nil, "parsing JSON page"},
		{"too large", func() error { _, err := c.Files(ctx, "huge"); return err }, errTooLarge, "WithMaxBodyBytes"},
		{"redirect loop", func() error { _, err := c.Files(ctx, "loop"); return err }, nil, "redirects"},
		{"redirect to userinfo", func() error { _, err := c.Files(ctx, "leaky"); return err }, nil, "listing leaky"},
		{"invalid name", func() error { _, err := c.Files(ctx, "../etc"); return err }, ErrInvalidName, "../etc"},
		{"refused", func() error { _, err := dead.Files(ctx, "demo"); return err }, nil, "refused"},
		{"hash mismatch", func() error {
			return c.Download(ctx, mod(func(f *File) { f.SHA256 = hexA }), dst)
		}, ErrHashMismatch, "expected " + hexA + ", got " + sum},
		{"size mismatch", func() error {
			return c.Download(ctx, mod(func(f *File) { f.Size = 3 }), dst)
		}, ErrSizeMismatch, "says 3 bytes, the server sent more"},
		{"size too small", func() error {
			return c.Download(ctx, mod(func(f *File) { f.Size = 100 }), dst)
		}, ErrSizeMismatch, "got 14"},
		{"no hash", func() error { return c.Download(ctx, mod(func(f *File) { f.SHA256 = "" }), dst) }, ErrNoHash, "demo-1.0.tar.gz"},
		{"malformed hash", func() error { return c.Download(ctx, mod(func(f *File) { f.SHA256 = "zz" }), dst) }, ErrNoHash, "malformed"},
		{"download 404", func() error {
			return c.Download(ctx, mod(func(f *File) { f.URL = ts.URL + "/f/missing.tar.gz" }), dst)
		}, nil, "404"},
		{"metadata hash mismatch", func() error {
			_, err := c.Metadata(ctx, mod(func(f *File) { f.HasMetadata, f.MetadataSHA256 = true, hexB }))
			return err
		}, ErrHashMismatch, hexB},
		{"metadata of sdist", func() error { _, err := c.Metadata(ctx, ok); return err }, nil, "not a wheel"},
		{"metadata of broken wheel", func() error {
			_, err := c.Metadata(ctx, mod(func(f *File) { f.Filename = "demo-1.0-py3-none-any.whl" }))
			return err
		}, nil, "reading wheel"},
		{"new: bad scheme", func() error { _, err := New("ftp://alice:" + secretPass + "@h/simple"); return err }, nil, "http or https"},
		{"new: unparsable", func() error { _, err := New("http://alice:" + secretPass + "@h:port/simple"); return err }, nil, "invalid URL"},
		{"new: query", func() error { _, err := New("http://alice:" + secretPass + "@h/simple?x=1"); return err }, nil, "query"},
	}
	basic := base64.StdEncoding.EncodeToString([]byte("alice:" + secretPass))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("error %q does not wrap %v", msg, tc.sentinel)
			}
			if !strings.Contains(msg, tc.contains) {
				t.Errorf("error %q does not mention %q", msg, tc.contains)
			}
			for _, secret := range []string{secretPass, basic, "alice"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error leaks %q: %s", secret, msg)
				}
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				t.Errorf("left behind %s", e.Name())
			}
		})
	}
}
