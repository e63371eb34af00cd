package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

func TestPushDedupAndRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	var events []Event
	var mu sync.Mutex
	o := quick()
	o.Progress = func(e Event) { mu.Lock(); events = append(events, e); mu.Unlock() }
	r := openRepo(t, s, "team/pylayer", o)
	ls := layers(t, 4, "w")
	a := artifact("k1", ls[0], ls[1], ls[2])

	desc, st, err := Push(ctx, r, a, "base-k1")
	must(t, err)
	if st != (PushStats{Blobs: 4, Uploaded: 4, BytesUploaded: s.uploadedBytes()}) {
		t.Errorf("first push: %+v, %d bytes uploaded", st, s.uploadedBytes())
	}
	_, want, _ := a.Manifest()
	if desc.Digest != want.Digest || desc.ArtifactType != oci.ArtifactTypeLayer || desc.MediaType != v1.MediaTypeImageManifest {
		t.Errorf("descriptor %+v, want %+v", desc, want)
	}

	// Again: every blob is there (HEAD), nothing is uploaded.
	before := s.uploadedBytes()
	_, st, err = Push(ctx, r, a, "base-k1")
	must(t, err)
	if st.Uploaded != 0 || st.Skipped != 4 || s.uploadedBytes() != before {
		t.Errorf("second push: %+v, %d new bytes", st, s.uploadedBytes()-before)
	}

	// Sharing the config and 2 of 3 layers: exactly the new layer is uploaded.
	b := artifact("k2", ls[0], ls[1], ls[3])
	_, st, err = Push(ctx, r, b, "base-k2")
	must(t, err)
	if st.Uploaded != 1 || st.Skipped != 3 || st.BytesUploaded != ls[3].Desc.Size || s.uploadedBytes()-before != ls[3].Desc.Size {
		t.Errorf("sharing push: %+v, %d new bytes, want %d", st, s.uploadedBytes()-before, ls[3].Desc.Size)
	}

	// Read it back through the Repo.
	got, err := r.Resolve(ctx, "base-k1")
	must(t, err)
	if got.Digest != desc.Digest || got.Size != desc.Size || got.MediaType != v1.MediaTypeImageManifest {
		t.Errorf("Resolve = %+v, want %+v", got, desc)
	}
	raw, err := r.Manifest(ctx, got)
	must(t, err)
	m, err := oci.ParseManifest(raw)
	must(t, err)
	for i, l := range m.Layers {
		rc, err := r.Blob(ctx, l)
		must(t, err)
		data, err := io.ReadAll(rc)
		rc.Close()
		must(t, err)
		file, _ := os.ReadFile(ls[i].Path)
		if !bytes.Equal(data, file) {
			t.Errorf("layer %d differs", i)
		}
	}
	if _, err := r.Resolve(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve(nope) = %v, want ErrNotFound", err)
	}
	if ok, err := r.HasBlob(ctx, ls[3].Desc); !ok || err != nil {
		t.Errorf("HasBlob = %v, %v", ok, err)
	}

	// go-containerregistry reads what we wrote.
	ref, _ := name.ParseReference(s.host + "/team/pylayer:base-k2")
	gd, err := remote.Get(ref)
	must(t, err)
	if gd.Digest.String() != mustManifestDigest(t, b) {
		t.Errorf("ggcr sees %s", gd.Digest)
	}
	if len(events) == 0 || events[len(events)-1].Kind != ManifestPushed || events[0].Repo != r.Name() {
		t.Errorf("events: %+v", events)
	}
}

func mustManifestDigest(t *testing.T, a oci.Artifact) string {
	_, d, err := a.Manifest()
	must(t, err)
	return d.Digest.String()
}

func TestPushParallel(t *testing.T) {
	for _, jobs := range []int{1, 3} {
		s := newServer(t, false)
		s.putDelay = 30 * 1e6 // 30ms
		o := quick()
		o.Jobs = jobs
		r := openRepo(t, s, "team/par", o)
		_, st, err := Push(context.Background(), r, artifact("k", layers(t, 8, "p")...), "t")
		must(t, err)
		if st.Uploaded != 9 {
			t.Errorf("jobs %d: %+v", jobs, st)
		}
		if s.maxInflight > jobs || jobs > 1 && s.maxInflight < 2 {
			t.Errorf("jobs %d: %d uploads at once", jobs, s.maxInflight)
		}
	}
}

func TestRetries(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	ls := layers(t, 2, "r")
	a := artifact("k", ls...)
	target := string(ls[1].Desc.Digest)
	failures := map[string]int{} // "METHOD kind" -> 503s left
	var mu sync.Mutex
	s.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		key := r.Method + " "
		switch {
		case r.URL.Path == "/v2/":
			key += "ping"
		case r.Method == http.MethodPut && strings.Contains(r.URL.RawQuery, target[len("sha256:"):]):
			key += "upload"
		case strings.HasSuffix(r.URL.Path, "/blobs/"+target):
			key += "blob"
		case strings.Contains(r.URL.Path, "/manifests/"):
			key += "manifest"
		}
		mu.Lock()
		defer mu.Unlock()
		if failures[key] > 0 {
			failures[key]--
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	set := func(kv ...any) {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < len(kv); i += 2 {
			failures[kv[i].(string)] = kv[i+1].(int)
		}
	}

	set("GET ping", 2)
	var retries int
	o := quick()
	o.Progress = func(e Event) {
		if e.Kind == Retrying {
			retries++
		}
	}
	r := openRepo(t, s, "team/retry", o)

	set("PUT upload", 2, "PUT manifest", 2)
	desc, _, err := Push(ctx, r, a, "t")
	must(t, err)
	if retries != 2 || s.count(http.MethodPut, "/blobs/uploads/") != 3+2 {
		t.Errorf("%d retry events, %d blob PUTs", retries, s.count(http.MethodPut, "/blobs/uploads/"))
	}

	set("GET blob", 2, "GET manifest", 2)
	raw, err := r.Manifest(ctx, desc)
	must(t, err)
	if !bytes.Contains(raw, []byte(target)) {
		t.Error("manifest lacks the layer")
	}
	rc, err := r.Blob(ctx, ls[1].Desc)
	must(t, err)
	_, err = io.Copy(io.Discard, rc)
	must(t, err)
	rc.Close()

	// Failing for good: the error says how often it tried.
	set("GET blob", 100)
	_, err = r.Blob(ctx, ls[1].Desc)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("permanent 503: %v", err)
	}
	set("GET blob", 0, "PUT upload", 100)
	_, err = r.PushBlob(ctx, ls[1].Desc, func() (io.ReadCloser, error) { return os.Open(ls[1].Path) })
	if err != nil {
		t.Errorf("blob already present, no upload expected: %v", err)
	}
}

func TestPushBlobRetryGivesUp(t *testing.T) {
	s := newServer(t, false)
	s.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut && isBlobUpload(r) {
			http.Error(w, "busy", http.StatusBadGateway)
			return true
		}
		return false
	})
	r := openRepo(t, s, "team/x", quick())
	l := layerBlob(t, "g", "x")
	_, err := r.PushBlob(context.Background(), l.Desc, func() (io.ReadCloser, error) { return os.Open(l.Path) })
	if err == nil || !strings.Contains(err.Error(), "after 3 attempts") || !strings.Contains(err.Error(), "502") {
		t.Fatalf("err = %v", err)
	}
	if n := s.count(http.MethodPut, "/blobs/uploads/"); n != 3 {
		t.Errorf("%d PUTs, want 3", n)
	}
}

func TestPushLocalBlobCorrupt(t *testing.T) {
	s := newServer(t, false)
	r := openRepo(t, s, "team/x", quick())
	l := layerBlob(t, "c", "content")
	must(t, os.WriteFile(l.Path, []byte("not the blob"), 0o644))
	_, _, err := Push(context.Background(), r, artifact("k", l), "t")
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), string(l.Desc.Digest)) {
		t.Fatalf("err = %v", err)
	}
	if n := s.count(http.MethodPut, "/manifests/"); n != 0 {
		t.Errorf("manifest pushed %d times after a failed blob", n)
	}
}

func TestInterruptedPush(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	o := quick()
	o.Jobs = 1
	r := openRepo(t, s, "team/int", o)
	a := artifact("k", layers(t, 4, "i")...)

	// The server dies in the middle of the third upload and stays down.
	var mu sync.Mutex
	uploads, down := 0, false
	s.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if down {
			reset(w)
			return true
		}
		if r.Method == http.MethodPut && isBlobUpload(r) {
			if uploads++; uploads == 3 {
				io.CopyN(io.Discard, r.Body, 100)
				down = true
				reset(w)
				return true
			}
		}
		return false
	})
	_, st, err := Push(ctx, r, a, "base-k")
	if err == nil {
		t.Fatal("push through a dead server succeeded")
	}
	if st.Uploaded != 2 {
		t.Errorf("interrupted push: %+v", st)
	}
	s.setFault(nil)
	if _, err := r.Resolve(ctx, "base-k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the tag exists after an interrupted push: %v", err)
	}

	// Running it again completes it, uploading only what is missing.
	desc, st, err := Push(ctx, r, a, "base-k")
	must(t, err)
	if st.Uploaded != 3 || st.Skipped != 2 {
		t.Errorf("resumed push: %+v", st)
	}
	if got, err := r.Resolve(ctx, "base-k"); err != nil || got.Digest != desc.Digest {
		t.Errorf("Resolve = %v, %v", got, err)
	}
}

// corrupt serves GETs of path through a writer that flips one byte.
type flipWriter struct {
	http.ResponseWriter
	at, n int
}

func (f *flipWriter) Write(p []byte) (int, error) {
	if f.at >= f.n && f.at < f.n+len(p) {
		p = append([]byte{}, p...)
		p[f.at-f.n] ^= 0x20
	}
	f.n += len(p)
	return f.ResponseWriter.Write(p)
}

func TestFetchVerifies(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	r := openRepo(t, s, "team/v", quick())
	l := layerBlob(t, "v", strings.Repeat("verify me\n", 500))
	desc, _, err := Push(ctx, r, artifact("k", l), "t")
	must(t, err)
	blobData, _ := os.ReadFile(l.Path)

	tests := []struct {
		name  string
		fault func(w http.ResponseWriter, r *http.Request) bool
		open  bool // the error comes from Blob, not from reading
	}{
		{"flipped byte", func(w http.ResponseWriter, r *http.Request) bool {
			s.reg.ServeHTTP(&flipWriter{ResponseWriter: w, at: len(blobData) / 2}, r)
			return true
		}, false},
		{"overrun without length", func(w http.ResponseWriter, r *http.Request) bool {
			w.Write(blobData)
			http.NewResponseController(w).Flush() // no Content-Length: chunked
			w.Write([]byte("trailing junk"))
			return true
		}, false},
		{"overrun with length", func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Length", "999999")
			w.Write(blobData)
			return true
		}, true},
		{"short", func(w http.ResponseWriter, r *http.Request) bool {
			w.Write(blobData[:len(blobData)-1])
			return true
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.setFault(func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, string(l.Desc.Digest)) {
					return tc.fault(w, r)
				}
				return false
			})
			defer s.setFault(nil)
			rc, err := r.Blob(ctx, l.Desc)
			if tc.open {
				if !errors.Is(err, ErrDigestMismatch) {
					t.Fatalf("Blob: %v, want ErrDigestMismatch", err)
				}
				return
			}
			must(t, err)
			defer rc.Close()
			data, err := io.ReadAll(rc)
			if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), string(l.Desc.Digest)) {
				t.Fatalf("read: %v, want ErrDigestMismatch naming the digest", err)
			}
			if int64(len(data)) > l.Desc.Size {
				t.Errorf("%d bytes returned, more than the %d of the descriptor", len(data), l.Desc.Size)
			}
			if _, err2 := rc.Read(make([]byte, 10)); err2 == nil || err2 == io.EOF {
				t.Errorf("the error is not sticky: %v", err2)
			}
		})
	}

	// A manifest that does not hash to its digest.
	s.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") {
			s.reg.ServeHTTP(&flipWriter{ResponseWriter: w, at: 10}, r)
			return true
		}
		return false
	})
	if _, err := r.Manifest(ctx, desc); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("Manifest: %v, want ErrDigestMismatch", err)
	}
}

func TestMountFrom(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	ls := layers(t, 2, "m")
	src := openRepo(t, s, "team/src", quick())
	_, _, err := Push(ctx, src, artifact("k", ls...), "t")
	must(t, err)

	// ggcr's registry shares blobs between repositories; make the target look empty so
	// that the mount is what provides the blobs.
	var mounts []string
	var mu sync.Mutex
	s.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasPrefix(r.URL.Path, "/v2/team/dst/blobs/") {
			return false
		}
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
			return true
		}
		if q := r.URL.Query(); r.Method == http.MethodPost && q.Get("mount") != "" {
			mu.Lock()
			mounts = append(mounts, q.Get("from")+"@"+q.Get("mount"))
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			return true
		}
		return false
	})
	o := quick()
	o.MountFrom = s.host + "/team/src"
	var mounted int
	o.Progress = func(e Event) {
		if e.Kind == BlobMounted {
			mounted++
		}
	}
	dst := openRepo(t, s, "team/dst", o)
	_, st, err := Push(ctx, dst, artifact("k", ls...), "t")
	must(t, err)
	if st.Uploaded != 0 || st.Skipped != 3 || mounted != 3 || len(mounts) != 3 || !strings.HasPrefix(mounts[0], "team/src@sha256:") {
		t.Errorf("stats %+v, %d mounted events, mounts %v", st, mounted, mounts)
	}

	o.MountFrom = "other.example:5000/team/src"
	ref, _ := ParseRef(s.host + "/team/dst")
	if _, err := Open(ctx, ref, o); err == nil || !strings.Contains(err.Error(), "cannot mount") {
		t.Errorf("mount from another registry: %v", err)
	}
}

func TestFetchResumes(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	r := openRepo(t, s, "team/resume", quick())
	l := layers(t, 1, "big")[0]
	_, _, err := Push(ctx, r, artifact("k", l), "t")
	must(t, err)
	want, _ := os.ReadFile(l.Path)

	for _, tc := range []struct {
		name      string
		cuts      int  // connections cut mid-body before one completes
		wantError bool // more cuts than attempts
	}{{"one cut", 1, false}, {"two cuts", 2, false}, {"too many", 5, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			cuts, ranges := 0, []string{}
			s.setFault(func(w http.ResponseWriter, req *http.Request) bool {
				if req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, string(l.Desc.Digest)) {
					return false
				}
				mu.Lock()
				defer mu.Unlock()
				ranges = append(ranges, req.Header.Get("Range"))
				if cuts < tc.cuts {
					cuts++
					w.Header().Set("Content-Length", fmt.Sprint(len(want)))
					w.Write(want[:len(want)/4]) // the first quarter, again and again
					http.NewResponseController(w).Flush()
					reset(w)
					return true
				}
				return false
			})
			defer s.setFault(nil)
			rc, err := r.Blob(ctx, l.Desc)
			if err == nil {
				var got []byte
				got, err = io.ReadAll(rc)
				rc.Close()
				if err == nil && !bytes.Equal(got, want) {
					t.Fatal("resumed download differs")
				}
			}
			if tc.wantError {
				if err == nil || !strings.Contains(err.Error(), "after 3 attempts") || !strings.Contains(err.Error(), string(l.Desc.Digest)) {
					t.Fatalf("err = %v, want the digest and the attempts", err)
				}
				return
			}
			must(t, err)
			if len(ranges) != tc.cuts+1 || ranges[0] != "" || ranges[1] == "" {
				t.Errorf("requests with ranges %q", ranges)
			}
		})
	}
}
