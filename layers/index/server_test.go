package index

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNegotiate(t *testing.T) {
	tests := []struct {
		accept    string
		allowJSON bool
		want      string
	}{
		{"", true, mediaTextHTML},
		{acceptHeader, true, mediaJSON},
		{acceptHeader, false, mediaHTML},
		{"text/html", true, mediaTextHTML},
		{"*/*", true, mediaJSON},
		{"*/*", false, mediaHTML},
		{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", true, mediaTextHTML},
		{"application/vnd.pypi.simple.latest+json", true, mediaJSON},
		{"application/vnd.pypi.simple.latest+html", true, mediaHTML},
		{"application/*;q=0.5, text/html;q=0.4", true, mediaJSON},
		{"application/json", true, ""},
		{"application/vnd.pypi.simple.v1+json", false, ""},
		{"text/html;q=0, */*", true, mediaJSON},
		{"text/html;q=0", true, ""},
		{"text/html;q=abc, application/vnd.pypi.simple.v1+html", true, mediaHTML},
		{"application/vnd.pypi.simple.v1+json;q=0.5, application/vnd.pypi.simple.v1+html;q=0.6", true, mediaHTML},
		{"garbage;;;, text/html", true, mediaTextHTML},
	}
	for _, tc := range tests {
		if got := negotiate(tc.accept, tc.allowJSON); got != tc.want {
			t.Errorf("negotiate(%q, %v) = %q, want %q", tc.accept, tc.allowJSON, got, tc.want)
		}
	}
}

func TestServer(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	w1 := wheelSpec{name: "demo_pkg", version: "1.0", requiresPython: ">=3.8,<4"}
	wb := writeWheel(t, dir, w1)
	writeWheel(t, outside, wheelSpec{name: "secret", version: "1.0"})
	os.Symlink(filepath.Join(outside, "secret-1.0-py3-none-any.whl"), filepath.Join(dir, "secret-1.0-py3-none-any.whl"))
	os.Symlink(w1.filename(), filepath.Join(dir, "alias-1.0-py3-none-any.whl")) // inside: allowed
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "broken-1.0-py3-none-any.whl"), []byte("not a zip"), 0o644)
	srv, err := NewServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, accept string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	tests := []struct {
		name, method, path, accept string
		status                     int
		contains, header           string // header is "Name: value-prefix"
	}{
		{"root html", "GET", "/simple/", "", 200, `<a href="demo-pkg/">demo-pkg</a>`, "Content-Type: text/html"},
		{"root json", "GET", "/simple/", mediaJSON, 200, `{"name":"demo-pkg"}`, "Content-Type: " + mediaJSON},
		{"root format override", "GET", "/simple/?format=json", "text/html", 200, `"api-version":"1.1"`, "Content-Type: " + mediaJSON},
		{"root not acceptable", "GET", "/simple/", "image/png", 406, "not acceptable", ""},
		{"bad format", "GET", "/simple/?format=xml", "", 406, "", ""},
		{"no slash", "GET", "/simple", "", 301, "", "Location: /simple/"},
		{"project html", "GET", "/simple/demo-pkg/", "", 200, `data-requires-python="&gt;=3.8,&lt;4"`, "Vary: Accept"},
		{"project hash", "GET", "/simple/demo-pkg/", "", 200, `href="../../files/demo_pkg-1.0-py3-none-any.whl#sha256=` + sha256Hex(wb) + `"`, ""},
		{"project json", "GET", "/simple/demo-pkg/", mediaJSON, 200, `"size":` + itoa(len(wb)), ""},
		{"redirect to normalized", "GET", "/simple/Demo_Pkg/?format=json", "", 301, "", "Location: /simple/demo-pkg/?format=json"},
		{"redirect to slash", "GET", "/simple/demo-pkg", "", 301, "", "Location: /simple/demo-pkg/"},
		{"unknown project", "GET", "/simple/nope/", "", 404, "", ""},
		{"traversal project", "GET", "/simple/..%2F..%2Fetc/", "", 404, "", ""},
		{"file", "GET", "/files/" + w1.filename(), "", 200, "", "Content-Type: application/octet-stream"},
		{"head file", "HEAD", "/files/" + w1.filename(), "", 200, "", "Content-Length: " + itoa(len(wb))},
		{"metadata", "GET", "/files/" + w1.filename() + ".metadata", "", 200, "Requires-Python: >=3.8,<4", ""},
		{"symlink inside served", "GET", "/files/alias-1.0-py3-none-any.whl", "", 200, "", ""},
		{"symlink outside 404", "GET", "/files/secret-1.0-py3-none-any.whl", "", 404, "", ""},
		{"sidecar not served", "GET", "/files/notes.txt", "", 404, "", ""},
		{"dotdot 404", "GET", "/files/..%2F" + filepath.Base(outside) + "%2Fsecret-1.0-py3-none-any.whl", "", 404, "", ""},
		{"nul 404", "GET", "/files/demo%00.whl", "", 404, "", ""},
		{"broken wheel has no metadata", "GET", "/files/broken-1.0-py3-none-any.whl.metadata", "", 404, "", ""},
		{"post", "POST", "/simple/", "", 405, "", "Allow: GET, HEAD"},
		{"elsewhere", "GET", "/etc/passwd", "", 404, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(tc.method, tc.path, tc.accept)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if !strings.Contains(body, tc.contains) {
				t.Errorf("body does not contain %q:\n%s", tc.contains, body)
			}
			if tc.header != "" {
				k, v, _ := strings.Cut(tc.header, ": ")
				if !strings.HasPrefix(resp.Header.Get(k), v) {
					t.Errorf("%s = %q, want prefix %q", k, resp.Header.Get(k), v)
				}
			}
		})
	}
	t.Run("projects", func(t *testing.T) {
		_, body := do("GET", "/simple/", mediaJSON)
		var root struct {
			Projects []struct{ Name string } `json:"projects"`
		}
		if err := json.Unmarshal([]byte(body), &root); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range root.Projects {
			names = append(names, p.Name)
		}
		if got := strings.Join(names, ","); got != "alias,broken,demo-pkg" {
			t.Errorf("projects = %s", got)
		}
	})
	t.Run("rescan and yank", func(t *testing.T) {
		w2 := wheelSpec{name: "demo_pkg", version: "2.0"}
		writeWheel(t, dir, w2)
		bump(t, dir)
		_, body := do("GET", "/simple/demo-pkg/", mediaJSON)
		if !strings.Contains(body, w2.filename()) {
			t.Fatalf("new wheel not listed:\n%s", body)
		}
		os.WriteFile(filepath.Join(dir, w2.filename()+".yanked"), []byte("  oops \n"), 0o644)
		_, body = do("GET", "/simple/demo-pkg/", mediaJSON)
		if !strings.Contains(body, `"yanked":"oops"`) {
			t.Errorf("yank reason missing:\n%s", body)
		}
		os.WriteFile(filepath.Join(dir, w2.filename()+".yanked"), nil, 0o644)
		_, body = do("GET", "/simple/demo-pkg/", "")
		if !strings.Contains(body, `data-yanked=""`) {
			t.Errorf("bare yank missing:\n%s", body)
		}
		// rewriting a wheel in place is noticed by size/mtime
		w3 := wheelSpec{name: "demo_pkg", version: "2.0", requiresPython: ">=3.12"}
		writeWheel(t, dir, w3)
		future := time.Now().Add(time.Hour)
		os.Chtimes(filepath.Join(dir, w3.filename()), future, future)
		_, body = do("GET", "/simple/demo-pkg/", "")
		if !strings.Contains(body, "&gt;=3.12") {
			t.Errorf("rewritten wheel not rehashed:\n%s", body)
		}
	})
}

// bump makes sure a directory's mtime changes even on coarse clocks.
func bump(t *testing.T, dir string) {
	t.Helper()
	future := time.Now().Add(time.Minute)
	if err := os.Chtimes(dir, future, future); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestServerPlain: with JSON and metadata files off the server is a plain PEP 503 index:
// no page announces a metadata file, none is served, every client gets HTML, and files
// still answer range requests.
func TestServerPlain(t *testing.T) {
	dir := t.TempDir()
	w1 := wheelSpec{name: "demo_pkg", version: "1.0", requiresPython: ">=3.8"}
	wb := writeWheel(t, dir, w1)
	srv, err := NewServer(dir, WithJSON(false), WithMetadataFiles(false))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	get := func(path, accept, rng string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("Accept", accept)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, page := get("/simple/demo-pkg/", acceptHeader, "")
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, mediaHTML) {
		t.Errorf("Content-Type %q, want HTML", ct)
	}
	if !strings.Contains(page, "#sha256="+sha256Hex(wb)) || !strings.Contains(page, "data-requires-python") || strings.Contains(page, "metadata") {
		t.Errorf("page should link the file with its hash and requires-python, and no metadata file:\n%s", page)
	}
	if resp, _ := get("/files/"+w1.filename()+".metadata", "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("metadata file: status %d, want 404", resp.StatusCode)
	}
	resp, body := get("/files/"+w1.filename(), "", "bytes=-22")
	if resp.StatusCode != http.StatusPartialContent || body != string(wb[len(wb)-22:]) || resp.Header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("range request: %s %q, Accept-Ranges %q; want 206 and the last 22 bytes", resp.Status, body, resp.Header.Get("Accept-Ranges"))
	}
}
