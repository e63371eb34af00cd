package registry

// A side-by-side of this package's registry client and go-containerregistry's
// pkg/v1/remote doing the same jobs against the same in-process registry: the measured
// reason registry/doc.go gives for keeping the hand-written client. Run with
//
//	go test -run '^$' -bench 'Push30|Pull30' -benchmem ./registry/
//
// and TestGGCRRemoteGaps for the behaviours remote does not have.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	gv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// wheels30 writes 30 blobs of random bytes, 16 KiB to 1.7 MiB (17 MiB in all, a lock of 30
// wheels of mixed sizes), and returns them as an artifact.
func wheels30(tb testing.TB) oci.Artifact {
	tb.Helper()
	dir := tb.TempDir()
	var ls []oci.LayerBlob
	for i := range 30 {
		b := make([]byte, 16<<10+i*i*2<<10)
		if _, err := rand.Read(b); err != nil {
			tb.Fatal(err)
		}
		p := filepath.Join(dir, strconv.Itoa(i)+".tar.gz")
		must(tb, os.WriteFile(p, b, 0o644))
		whl := fmt.Sprintf("w%d-1.0-py3-none-any.whl", i)
		ls = append(ls, oci.LayerBlob{
			Path:  p,
			Desc:  v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: digest.FromBytes(b), Size: int64(len(b))},
			Title: oci.BlobTitle(whl), Wheel: whl, WheelSHA256: digest.FromString(whl).Encoded(),
		})
	}
	return artifact("k30", ls...)
}

// countingTransport counts the requests a client sends.
type countingTransport struct {
	n     atomic.Int64
	inner http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.inner.RoundTrip(r)
}

// fileLayer is a blob on disk as go-containerregistry's v1.Layer, its digest known up
// front (as pylayer's are: the publish step hashed them).
type fileLayer struct{ b oci.LayerBlob }

func (l fileLayer) Digest() (gv1.Hash, error)            { return gv1.NewHash(string(l.b.Desc.Digest)) }
func (l fileLayer) DiffID() (gv1.Hash, error)            { return l.Digest() }
func (l fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.b.Path) }
func (l fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(l.b.Path) }
func (l fileLayer) Size() (int64, error)                 { return l.b.Desc.Size, nil }
func (l fileLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.b.Desc.MediaType), nil
}

// bytesLayer is the config blob.
type bytesLayer struct {
	b  []byte
	mt string
}

func (l bytesLayer) Digest() (gv1.Hash, error) { return gv1.NewHash(digest.FromBytes(l.b).String()) }
func (l bytesLayer) DiffID() (gv1.Hash, error) { return l.Digest() }
func (l bytesLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(l.b))), nil
}
func (l bytesLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }
func (l bytesLayer) Size() (int64, error)                 { return int64(len(l.b)), nil }
func (l bytesLayer) MediaType() (types.MediaType, error)  { return types.MediaType(l.mt), nil }

// rawManifest is a manifest as go-containerregistry's Taggable.
type rawManifest struct {
	raw []byte
	mt  string
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.MediaType(m.mt), nil }

// ggcrPush does what Push does with remote's Pusher: every blob (HEAD, then upload unless
// present), four at a time, then the manifest.
func ggcrPush(ctx context.Context, p *remote.Pusher, ref name.Reference, a oci.Artifact) error {
	raw, mdesc, err := a.Manifest()
	if err != nil {
		return err
	}
	ls := []gv1.Layer{bytesLayer{a.Config, oci.ConfigMediaType(a.ArtifactType)}}
	for _, l := range a.Layers {
		ls = append(ls, fileLayer{l})
	}
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, defaultJobs)
		mu    sync.Mutex
		first error
	)
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := p.Upload(ctx, ref.Context(), l); err != nil {
				mu.Lock()
				first = errors.Join(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return p.Push(ctx, ref, rawManifest{raw, mdesc.MediaType})
}

// ggcrPull does what a pull's transfers do with remote's Puller: resolve the tag, read the
// manifest, read every blob (verified by remote) to the end.
func ggcrPull(ctx context.Context, p *remote.Puller, ref name.Tag) (int64, error) {
	d, err := p.Get(ctx, ref)
	if err != nil {
		return 0, err
	}
	m, err := oci.ParseManifest(d.Manifest)
	if err != nil {
		return 0, err
	}
	return drainBlobs(m, func(b v1.Descriptor) (io.ReadCloser, error) {
		l, err := p.Layer(ctx, ref.Context().Digest(string(b.Digest)))
		if err != nil {
			return nil, err
		}
		return l.Compressed()
	})
}

// drainBlobs reads the config and every layer of m through open, and counts the bytes.
func drainBlobs(m *v1.Manifest, open func(v1.Descriptor) (io.ReadCloser, error)) (int64, error) {
	var n int64
	for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		rc, err := open(b)
		if err != nil {
			return n, err
		}
		k, err := io.Copy(io.Discard, rc)
		rc.Close()
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// oursPull is the same through this package: Open, Resolve, Manifest, every Blob.
func oursPull(ctx context.Context, s *server, ct http.RoundTripper, path string) (int64, error) {
	ref, err := ParseRef(s.host + "/" + path + ":t")
	if err != nil {
		return 0, err
	}
	r, err := Open(ctx, ref, Options{Transport: ct})
	if err != nil {
		return 0, err
	}
	_, raw, err := ResolveRef(ctx, r, ref)
	if err != nil {
		return 0, err
	}
	m, err := oci.ParseManifest(raw)
	if err != nil {
		return 0, err
	}
	return drainBlobs(m, func(b v1.Descriptor) (io.ReadCloser, error) { return r.Blob(ctx, b) })
}

func oursPush(ctx context.Context, s *server, ct http.RoundTripper, path string, a oci.Artifact) error {
	ref, err := ParseRef(s.host + "/" + path)
	if err != nil {
		return err
	}
	r, err := Open(ctx, ref, Options{Transport: ct})
	if err != nil {
		return err
	}
	_, _, err = Push(ctx, r, a, "t")
	return err
}

func ggcrPusher(ct http.RoundTripper) (*remote.Pusher, error) {
	return remote.NewPusher(remote.WithTransport(ct), remote.WithJobs(defaultJobs))
}

// BenchmarkPush30 pushes the 30-blob artifact into a new, empty registry each time (every
// blob uploaded: the in-memory registry shares blobs between repositories), and into one
// that has it (every blob found by HEAD).
func BenchmarkPush30(b *testing.B) {
	a := wheels30(b)
	ctx := context.Background()
	for _, dedup := range []bool{false, true} {
		mode := "fresh"
		if dedup {
			mode = "present"
		}
		b.Run("ours/"+mode, func(b *testing.B) {
			s := newServer(b, false)
			ct := &countingTransport{inner: http.DefaultTransport}
			must(b, oursPush(ctx, s, ct, "dedup", a))
			ct.n.Store(0)
			b.ResetTimer()
			for range b.N {
				if !dedup {
					b.StopTimer()
					s = newServer(b, false)
					b.StartTimer()
				}
				must(b, oursPush(ctx, s, ct, "dedup", a))
			}
			b.ReportMetric(float64(ct.n.Load())/float64(b.N), "reqs/op")
		})
		b.Run("ggcr/"+mode, func(b *testing.B) {
			s := newServer(b, false)
			ct := &countingTransport{inner: http.DefaultTransport}
			p, err := ggcrPusher(ct)
			must(b, err)
			ref, err := name.ParseReference(s.host+"/dedup:t", name.Insecure)
			must(b, err)
			must(b, ggcrPush(ctx, p, ref, a))
			ct.n.Store(0)
			b.ResetTimer()
			for range b.N {
				if !dedup {
					b.StopTimer()
					s = newServer(b, false)
					ref, err = name.ParseReference(s.host+"/dedup:t", name.Insecure)
					must(b, err)
					b.StartTimer()
				}
				// A new Pusher per push, as each pylayer command makes one.
				p, err := ggcrPusher(ct)
				must(b, err)
				must(b, ggcrPush(ctx, p, ref, a))
			}
			b.ReportMetric(float64(ct.n.Load())/float64(b.N), "reqs/op")
		})
	}
}

// BenchmarkPull30 resolves the artifact's tag and reads its manifest and every blob.
func BenchmarkPull30(b *testing.B) {
	a := wheels30(b)
	ctx := context.Background()
	s := newServer(b, false)
	must(b, oursPush(ctx, s, http.DefaultTransport, "p", a))
	var want int64 = int64(len(a.Config))
	for _, l := range a.Layers {
		want += l.Desc.Size
	}
	b.Run("ours", func(b *testing.B) {
		ct := &countingTransport{inner: http.DefaultTransport}
		b.SetBytes(want)
		for range b.N {
			n, err := oursPull(ctx, s, ct, "p")
			must(b, err)
			if n != want {
				b.Fatalf("read %d bytes, want %d", n, want)
			}
		}
		b.ReportMetric(float64(ct.n.Load())/float64(b.N), "reqs/op")
	})
	b.Run("ggcr", func(b *testing.B) {
		ct := &countingTransport{inner: http.DefaultTransport}
		ref, err := name.NewTag(s.host+"/p:t", name.Insecure)
		must(b, err)
		b.SetBytes(want)
		for range b.N {
			p, err := remote.NewPuller(remote.WithTransport(ct))
			must(b, err)
			n, err := ggcrPull(ctx, p, ref)
			must(b, err)
			if n != want {
				b.Fatalf("read %d bytes, want %d", n, want)
			}
		}
		b.ReportMetric(float64(ct.n.Load())/float64(b.N), "reqs/op")
	})
}

// TestGGCRRemoteGaps shows, against the same in-process registry and faults, behaviours
// pylayer needs that go-containerregistry's remote lacks (registry/doc.go). When one of
// these fails because remote gained the behaviour, that part of the reason is gone.
func TestGGCRRemoteGaps(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	r := openRepo(t, s, "team/gaps", quick())
	l := layers(t, 1, "big")[0]
	_, _, err := Push(ctx, r, artifact("k", l), "t")
	must(t, err)
	want, err := os.ReadFile(l.Path)
	must(t, err)

	t.Run("a connection cut mid-blob", func(t *testing.T) {
		// Each first GET of the blob sends a quarter of it and resets the connection.
		var mu sync.Mutex
		cut := map[string]bool{}
		s.setFault(func(w http.ResponseWriter, req *http.Request) bool {
			if req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, string(l.Desc.Digest)) || req.Header.Get("Range") != "" {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			if cut[req.UserAgent()] {
				return false
			}
			cut[req.UserAgent()] = true
			w.Header().Set("Content-Length", fmt.Sprint(len(want)))
			w.Write(want[:len(want)/4])
			http.NewResponseController(w).Flush()
			reset(w)
			return true
		})
		defer s.setFault(nil)

		rc, err := r.Blob(ctx, l.Desc)
		must(t, err)
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ours: read %d of %d bytes, err %v; want the blob, resumed", len(got), len(want), err)
		}

		p, err := remote.NewPuller(remote.WithUserAgent("ggcr"))
		must(t, err)
		gref, err := name.NewDigest(s.host+"/team/gaps@"+string(l.Desc.Digest), name.Insecure)
		must(t, err)
		gl, err := p.Layer(ctx, gref)
		must(t, err)
		grc, err := gl.Compressed()
		must(t, err)
		n, err := io.Copy(io.Discard, grc)
		grc.Close()
		if err == nil {
			t.Fatalf("remote read all %d bytes through a cut connection: it resumes now, reconsider registry/doc.go", n)
		}
		t.Logf("remote: %d of %d bytes, then %v", n, len(want), err)
	})

	t.Run("an authentication error", func(t *testing.T) {
		s.mu.Lock()
		s.user, s.pass = "u", "p"
		s.mu.Unlock()
		defer func() { s.mu.Lock(); s.user, s.pass = "", ""; s.mu.Unlock() }()
		t.Setenv("DOCKER_CONFIG", t.TempDir())

		ref, err := ParseRef(s.host + "/team/gaps")
		must(t, err)
		ar, err := Open(ctx, ref, quick())
		must(t, err)
		_, ours := ar.Resolve(ctx, "t")
		if !errors.Is(ours, ErrUnauthorized) || !strings.Contains(ours.Error(), "no credentials for "+s.host) || !strings.Contains(ours.Error(), "config.json") {
			t.Fatalf("ours: %v; want it to say no credentials were found, and where they were looked for", ours)
		}
		gref, err := name.NewTag(s.host+"/team/gaps:t", name.Insecure)
		must(t, err)
		_, theirs := remote.Head(gref, remote.WithContext(ctx))
		if theirs == nil {
			t.Fatal("remote: no error without credentials")
		}
		if strings.Contains(theirs.Error(), "config.json") || strings.Contains(theirs.Error(), "credential") {
			t.Fatalf("remote: %v: it names the credential source now, reconsider registry/doc.go", theirs)
		}
		t.Logf("ours: %v\nremote: %v", ours, theirs)
	})
}
