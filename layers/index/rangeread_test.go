package index

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// bigWheel is a wheel of about 240 KiB, more than the first range request asks for, with
// its METADATA first (so that reading it takes a second request) or last.
func bigWheel(metaFirst bool) (data, md []byte) {
	meta := metaMember(true, false)
	ms := append(bigMembers(30, 8000), meta)
	if metaFirst {
		ms = append([]zmember{meta}, bigMembers(30, 8000)...)
	}
	data, _ = zipSpec{members: ms}.build()
	return data, meta.data
}

// served is one request a test server answered.
type served struct {
	path, rng string
	status    int
	bytes     int64
}

// recorder wraps h and records what it answered.
type recorder struct {
	h    http.Handler
	mu   sync.Mutex
	reqs []served
}

// ServeHTTP records requests in the order they arrive, and what they were answered once
// the handler is done.
func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	i := len(rec.reqs)
	rec.reqs = append(rec.reqs, served{path: r.URL.Path, rng: r.Header.Get("Range")})
	rec.mu.Unlock()
	cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
	rec.h.ServeHTTP(cw, r)
	rec.mu.Lock()
	rec.reqs[i].status, rec.reqs[i].bytes = cw.status, cw.n
	rec.mu.Unlock()
}

// files returns the requests for files; the server must be closed first, so that every
// handler is done.
func (rec *recorder) files() []served {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []served
	for _, s := range rec.reqs {
		if strings.HasPrefix(s.path, "/files/") || strings.HasPrefix(s.path, "/f/") {
			out = append(out, s)
		}
	}
	return out
}

type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
	hook   func(h http.Header, status int) int
}

func (w *countingWriter) WriteHeader(status int) {
	if w.hook != nil {
		status = w.hook(w.Header(), status)
	}
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// TestMetadataByRange: against pylayer's own server with metadata files off (a plain PEP
// 503 index), Metadata reads a wheel's METADATA with range requests only, fetching a
// fraction of the wheel, and gets the bytes the PEP 658 file of the same wheel has.
func TestMetadataByRange(t *testing.T) {
	for _, metaFirst := range []bool{false, true} {
		t.Run("metadata first "+strconv.FormatBool(metaFirst), func(t *testing.T) {
			dir := t.TempDir()
			data, want := bigWheel(metaFirst)
			if err := os.WriteFile(filepath.Join(dir, "demo-1.0-py3-none-any.whl"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			srv, err := NewServer(dir, WithJSON(false), WithMetadataFiles(false))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			rec := &recorder{h: srv}
			ts := httptest.NewServer(rec)
			defer ts.Close()
			c, err := New(ts.URL+"/simple/", WithNetrc(""))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			files, err := c.Files(ctx, "demo")
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != 1 || files[0].HasMetadata || files[0].Size != 0 {
				t.Fatalf("a plain index lists %+v: want one file, no metadata file, no size", files)
			}
			got, err := c.Metadata(ctx, files[0])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("METADATA: got %.60q, want %.60q", got, want)
			}
			if n := c.SizeOf(files[0]); n != int64(len(data)) {
				t.Errorf("SizeOf after the range reads: %d, want the file's %d bytes", n, len(data))
			}
			ts.Close()
			reqs := rec.files()
			var sent int64
			for _, s := range reqs {
				if s.rng == "" || s.status != http.StatusPartialContent {
					t.Errorf("request %+v: want a 206 answer to a range request", s)
				}
				sent += s.bytes
			}
			wantReqs := 1
			if metaFirst {
				wantReqs = 2
			}
			if len(reqs) != wantReqs || sent > int64(len(data))*2/3 {
				t.Errorf("%d requests for %d of the wheel's %d bytes (%+v), want %d requests for a part of it", len(reqs), sent, len(data), reqs, wantReqs)
			}
		})
	}
}

// TestMetadataRangeFallback: a server that refuses ranges in any way costs a download of
// the whole wheel, which is verified, and yields the same METADATA; a 404 is an error at
// once.
func TestMetadataRangeFallback(t *testing.T) {
	data, want := bigWheel(true)
	serve := func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "w.whl", time.Time{}, bytes.NewReader(data))
	}
	hooked := func(hook func(h http.Header, status int) int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			serve(&countingWriter{ResponseWriter: w, hook: hook}, r)
		}
	}
	secondRange := 0
	var mu sync.Mutex
	cases := []struct {
		name  string
		h     http.Handler
		reqs  int // requests in all
		size  int64
		fails func(error) bool
	}{
		{"ignores Range", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(data) }), 1, 0, nil},
		{"416", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Range") != "" {
				http.Error(w, "no", http.StatusRequestedRangeNotSatisfiable)
				return
			}
			serve(w, r)
		}), 2, 0, nil},
		{"500 on ranges", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Range") != "" {
				http.Error(w, "no", http.StatusInternalServerError)
				return
			}
			serve(w, r)
		}), 2, 0, nil},
		{"no Accept-Ranges", hooked(func(h http.Header, s int) int { h.Del("Accept-Ranges"); return s }), 2, 0, nil},
		{"malformed Content-Range", hooked(func(h http.Header, s int) int {
			if s == http.StatusPartialContent {
				h.Set("Content-Range", "bytes x-y/z")
			}
			return s
		}), 2, 0, nil},
		{"another range than asked", hooked(func(h http.Header, s int) int {
			if s == http.StatusPartialContent {
				cr := h.Get("Content-Range")
				a, _, _ := strings.Cut(strings.TrimPrefix(cr, "bytes "), "-")
				n, _ := strconv.Atoi(a)
				h.Set("Content-Range", strings.Replace(cr, a+"-", strconv.Itoa(n+1)+"-", 1))
			}
			return s
		}), 2, 0, nil},
		{"content coding", hooked(func(h http.Header, s int) int {
			if s == http.StatusPartialContent {
				h.Set("Content-Encoding", "gzip")
			}
			return s
		}), 2, 0, nil},
		{"206 without Content-Range", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Range") != "" {
				w.Header().Set("Accept-Ranges", "bytes")
				w.WriteHeader(http.StatusPartialContent)
				w.Write(data)
				return
			}
			serve(w, r)
		}), 2, 0, nil},
		{"a later range answered whole", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if r.Header.Get("Range") != "" {
				secondRange++
			}
			n := secondRange
			mu.Unlock()
			if n == 2 {
				w.Write(data)
				return
			}
			serve(w, r)
		}), 3, 0, nil},
		{"sizes disagree", http.HandlerFunc(serve), 2, int64(len(data)) + 1, func(err error) bool { return errors.Is(err, ErrSizeMismatch) }},
		{"404", http.HandlerFunc(http.NotFound), 1, 0, func(err error) bool {
			var he *HTTPError
			return errors.As(err, &he) && he.StatusCode == http.StatusNotFound
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{h: tc.h}
			ts := httptest.NewServer(rec)
			defer ts.Close()
			c, err := New(ts.URL+"/simple/", WithNetrc(""))
			if err != nil {
				t.Fatal(err)
			}
			f := File{Project: "demo", Filename: "demo-1.0-py3-none-any.whl", URL: ts.URL + "/f/demo-1.0-py3-none-any.whl", SHA256: sha256Hex(data), Size: tc.size}
			got, err := c.Metadata(context.Background(), f)
			ts.Close()
			reqs := rec.files()
			if len(reqs) != tc.reqs {
				t.Errorf("%d requests (%+v), want %d", len(reqs), reqs, tc.reqs)
			}
			if tc.fails != nil {
				if !tc.fails(err) {
					t.Fatalf("err %v, not the one expected", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("METADATA: got %.60q, want %.60q", got, want)
			}
			if n := c.SizeOf(f); n != int64(len(data)) {
				t.Errorf("SizeOf after the download: %d, want the file's %d bytes", n, len(data))
			}
			if last := reqs[len(reqs)-1]; tc.reqs > 1 && last.rng != "" {
				t.Errorf("the last request %+v was not a whole download", last)
			}
		})
	}
}

// TestMetadataRangeWholeFileVerified: a wheel smaller than the first range request comes
// whole in its answer, and is checked against the index's sha256 like a download.
func TestMetadataRangeWholeFileVerified(t *testing.T) {
	small := wheelSpec{name: "demo", version: "1.0"}
	data := small.bytes(t)
	rec := &recorder{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "w.whl", time.Time{}, bytes.NewReader(data))
	})}
	ts := httptest.NewServer(rec)
	defer ts.Close()
	c, err := New(ts.URL+"/simple/", WithNetrc(""))
	if err != nil {
		t.Fatal(err)
	}
	f := File{Project: "demo", Filename: small.filename(), URL: ts.URL + "/f/" + small.filename(), SHA256: sha256Hex(data)}
	got, err := c.Metadata(context.Background(), f)
	if err != nil || !bytes.Equal(got, small.metadata()) {
		t.Fatalf("Metadata = %q, %v; want %q", got, err, small.metadata())
	}
	f.SHA256 = hexA
	if _, err := c.Metadata(context.Background(), f); !errors.Is(err, ErrHashMismatch) {
		t.Errorf("a wheel whose bytes are not the index's: err %v, want ErrHashMismatch", err)
	}
	ts.Close()
	// one range request for the good wheel; for the bad one that and a whole download
	if reqs := rec.files(); len(reqs) != 3 || reqs[0].rng == "" || reqs[1].rng == "" || reqs[2].rng != "" {
		t.Errorf("requests %+v, want a range request, then a range request and a download", reqs)
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in         string
		a, b, size int64
		ok         bool
	}{
		{"bytes 0-10/11", 0, 10, 11, true},
		{"bytes 5-5/6", 5, 5, 6, true},
		{"bytes 0-10/10", 0, 0, 0, false},
		{"bytes 6-5/10", 0, 0, 0, false},
		{"bytes 0-10/*", 0, 0, 0, false},
		{"bytes */10", 0, 0, 0, false},
		{"bytes -1-10/20", 0, 0, 0, false},
		{"bytes +1-10/20", 0, 0, 0, false},
		{"bits 0-1/2", 0, 0, 0, false},
		{"bytes 0-1/99999999999999999999", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		a, b, size, err := parseContentRange(tc.in)
		if (err == nil) != tc.ok || tc.ok && (a != tc.a || b != tc.b || size != tc.size) {
			t.Errorf("parseContentRange(%q) = %d, %d, %d, %v", tc.in, a, b, size, err)
		}
	}
}
