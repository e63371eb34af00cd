package index

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMetadataCache: metadata read once (by range, or as a PEP 658 file) is read again
// from the cache by the file's sha256, with no request, even by another client of another
// index; cached metadata that does not have the index's metadata sha256 is fetched anew.
func TestMetadataCache(t *testing.T) {
	data, want := bigWheel(true)
	rec := &recorder{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := data
		if filepath.Ext(r.URL.Path) == ".metadata" {
			body = want
		}
		http.ServeContent(w, r, "w", time.Time{}, bytes.NewReader(body))
	})}
	ts := httptest.NewServer(rec)
	cache := t.TempDir()
	c, err := New(ts.URL+"/simple/", WithNetrc(""), WithMetadataCache(cache))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f := File{Project: "demo", Filename: "demo-1.0-py3-none-any.whl", URL: ts.URL + "/f/demo-1.0-py3-none-any.whl", SHA256: sha256Hex(data)}
	if got, err := c.Metadata(ctx, f); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("first read: %.40q, %v", got, err)
	}
	entry := filepath.Join(cache, "sha256", f.SHA256)
	if b, err := os.ReadFile(entry); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("cache entry %s: %.40q, %v", entry, b, err)
	}
	ts.Close()
	n := len(rec.files())

	// Another index, down: only the cache can answer.
	other, err := New("http://127.0.0.1:1/simple/", WithNetrc(""), WithMetadataCache(cache))
	if err != nil {
		t.Fatal(err)
	}
	moved := f
	moved.URL = "http://127.0.0.1:1/files/" + f.Filename
	if got, err := other.Metadata(ctx, moved); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("from the cache: %.40q, %v", got, err)
	}

	// A PEP 658 entry whose cached bytes are not what the index says is fetched again,
	// and the cache mended.
	ts = httptest.NewServer(rec)
	defer ts.Close()
	c, err = New(ts.URL+"/simple/", WithNetrc(""), WithMetadataCache(cache))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(entry, []byte("Name: evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pep658 := f
	pep658.URL = ts.URL + "/f/" + f.Filename
	pep658.HasMetadata, pep658.MetadataSHA256 = true, sha256Hex(want)
	if got, err := c.Metadata(ctx, pep658); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("stale entry: %.40q, %v", got, err)
	}
	if b, _ := os.ReadFile(entry); !bytes.Equal(b, want) {
		t.Errorf("cache entry not mended: %.40q", b)
	}
	if got, err := c.Metadata(ctx, pep658); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("mended entry: %.40q, %v", got, err)
	}
	ts.Close()
	reqs := rec.files()[n:]
	if len(reqs) != 1 || filepath.Ext(reqs[0].path) != ".metadata" {
		t.Errorf("requests after the first read: %+v, want the one .metadata file", reqs)
	}
}

// TestMetadataCacheUnusable: a cache directory that cannot be written is no error.
func TestMetadataCacheUnusable(t *testing.T) {
	small := wheelSpec{name: "demo", version: "1.0"}
	data := small.bytes(t)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "w", time.Time{}, bytes.NewReader(data))
	}))
	defer ts.Close()
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(ts.URL+"/simple/", WithNetrc(""), WithMetadataCache(notDir))
	if err != nil {
		t.Fatal(err)
	}
	f := File{Project: "demo", Filename: small.filename(), URL: ts.URL + "/f/" + small.filename(), SHA256: sha256Hex(data)}
	if got, err := c.Metadata(context.Background(), f); err != nil || !bytes.Equal(got, small.metadata()) {
		t.Fatalf("Metadata = %q, %v", got, err)
	}
}
