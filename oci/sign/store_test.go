package sign

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	ggstatic "github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// remoteStore is a minimal Store over go-containerregistry's remote package, standing
// in for registry.Repo in these tests.
type remoteStore struct {
	repo name.Repository
}

var _ Store = (*remoteStore)(nil)

// newRegistry starts an in-process registry and returns a Store for one repository
// of it and the registry's host:port. The registry has no referrers API (as
// distribution 2.8 has none): referrers are listed by the fallback tag.
func newRegistry(t *testing.T, opts ...registry.Option) (*remoteStore, string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(append([]registry.Option{registry.Logger(log.New(io.Discard, "", 0))}, opts...)...))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(u.Host+"/team/pylayer", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return &remoteStore{repo: repo}, u.Host
}

// apiStore is a remoteStore of a registry with the referrers API, and a ReferrersLister.
type apiStore struct{ *remoteStore }

var _ ReferrersLister = apiStore{}

func newAPIRegistry(t *testing.T) apiStore {
	t.Helper()
	s, _ := newRegistry(t, registry.WithReferrersSupport(true))
	return apiStore{s}
}

// Referrers asks the referrers API, as registry.Repo does.
func (r apiStore) Referrers(ctx context.Context, subject digest.Digest) ([]v1.Descriptor, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url("referrers/"+subject.String()), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", v1.MediaTypeImageIndex)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("referrers API: %w", oci.ErrNotFound)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("referrers API: %s", resp.Status)
	}
	var idx v1.Index
	if err := json.NewDecoder(resp.Body).Decode(&idx); err != nil {
		return nil, err
	}
	return idx.Manifests, nil
}

func (r *remoteStore) url(path string) string {
	return "http://" + r.repo.RegistryStr() + "/v2/" + r.repo.RepositoryStr() + "/" + path
}

func (r *remoteStore) Name() string { return r.repo.Name() }

func notFound(err error) error {
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %v", oci.ErrNotFound, err)
	}
	return err
}

func (r *remoteStore) Resolve(ctx context.Context, tag string) (v1.Descriptor, error) {
	d, err := remote.Head(r.repo.Tag(tag), remote.WithContext(ctx))
	if err != nil {
		return v1.Descriptor{}, notFound(err)
	}
	return v1.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size}, nil
}

func (r *remoteStore) Manifest(ctx context.Context, d v1.Descriptor) ([]byte, error) {
	got, err := remote.Get(r.repo.Digest(d.Digest.String()), remote.WithContext(ctx))
	if err != nil {
		return nil, notFound(err)
	}
	if digest.FromBytes(got.Manifest) != d.Digest {
		return nil, oci.ErrDigestMismatch
	}
	return got.Manifest, nil
}

func (r *remoteStore) Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	l, err := remote.Layer(r.repo.Digest(d.Digest.String()), remote.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return l.Compressed() // verifies the digest at EOF
}

func (r *remoteStore) PushBlob(ctx context.Context, d v1.Descriptor, open func() (io.ReadCloser, error)) (bool, error) {
	rc, err := open()
	if err != nil {
		return false, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return false, err
	}
	if digest.FromBytes(b) != d.Digest {
		return false, oci.ErrDigestMismatch
	}
	return true, remote.WriteLayer(r.repo, ggstatic.NewLayer(b, types.MediaType(d.MediaType)), remote.WithContext(ctx))
}

// PushManifest PUTs the bytes itself: go-containerregistry's remote.Put would update
// the referrers fallback tag of a manifest with a subject on its own, hiding whether
// Sign does.
func (r *remoteStore) PushManifest(ctx context.Context, raw []byte, mediaType, tag string) (v1.Descriptor, error) {
	d := digest.FromBytes(raw)
	reference := d.String()
	if tag != "" {
		reference = tag
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, r.url("manifests/"+reference), bytes.NewReader(raw))
	if err != nil {
		return v1.Descriptor{}, err
	}
	req.Header.Set("Content-Type", mediaType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v1.Descriptor{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		return v1.Descriptor{}, fmt.Errorf("PUT manifest %s: %s %s", reference, resp.Status, b)
	}
	return v1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(raw))}, nil
}

// deleteTag removes a tag from the registry.
func (r *remoteStore) deleteTag(t *testing.T, tag string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, r.url("manifests/"+tag), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE %s: %s", tag, resp.Status)
	}
}

// layoutStore is a Store over an oci.Layout. Tagging a raw manifest is done by hand
// here: oci.Layout only tags the artifacts it assembles.
type layoutStore struct{ l *oci.Layout }

var _ Store = layoutStore{}

func newLayoutStore(t *testing.T) layoutStore {
	t.Helper()
	l, err := oci.OpenLayout(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return layoutStore{l}
}

func (s layoutStore) Name() string { return "oci:" + s.l.Dir }
func (s layoutStore) Resolve(ctx context.Context, tag string) (v1.Descriptor, error) {
	return s.l.Resolve(ctx, tag)
}
func (s layoutStore) Manifest(ctx context.Context, d v1.Descriptor) ([]byte, error) {
	rc, err := s.l.OpenBlob(ctx, d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
func (s layoutStore) Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	return s.l.OpenBlob(ctx, d)
}
func (s layoutStore) PushBlob(ctx context.Context, d v1.Descriptor, open func() (io.ReadCloser, error)) (bool, error) {
	if s.l.HasBlob(d.Digest) {
		return false, nil
	}
	rc, err := open()
	if err != nil {
		return false, err
	}
	defer rc.Close()
	return true, s.l.WriteBlob(ctx, rc, d)
}
func (s layoutStore) PushManifest(ctx context.Context, raw []byte, mediaType, tag string) (v1.Descriptor, error) {
	d := v1.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	if err := s.l.WriteBlob(ctx, bytes.NewReader(raw), d); err != nil {
		return v1.Descriptor{}, err
	}
	if tag == "" {
		return d, nil
	}
	p := filepath.Join(s.l.Dir, "index.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return v1.Descriptor{}, err
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return v1.Descriptor{}, err
	}
	kept := idx.Manifests[:0]
	for _, m := range idx.Manifests {
		if m.Annotations[v1.AnnotationRefName] != tag {
			kept = append(kept, m)
		}
	}
	e := d
	e.Annotations = map[string]string{v1.AnnotationRefName: tag}
	idx.Manifests = append(kept, e)
	sort.Slice(idx.Manifests, func(i, j int) bool {
		return idx.Manifests[i].Annotations[v1.AnnotationRefName] < idx.Manifests[j].Annotations[v1.AnnotationRefName]
	})
	if b, err = json.Marshal(idx); err != nil {
		return v1.Descriptor{}, err
	}
	return d, os.WriteFile(p, b, 0o644)
}

// pushSubject stores a small pylayer artifact (one wheel blob) whose content depends
// on seed, tagged base-<seed>, and returns its manifest descriptor.
func pushSubject(t *testing.T, s Store, seed string) v1.Descriptor {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "site-packages", "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "site-packages", "pkg", "__init__.py"), []byte("SEED = "+seed+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var blob bytes.Buffer
	ld, _, err := oci.TarTree(ctx, dir, &blob)
	if err != nil {
		t.Fatal(err)
	}
	cfg := []byte(`{"seed":"` + seed + `"}`)
	a := oci.Artifact{
		ArtifactType: oci.ArtifactTypeLayer,
		Config:       cfg,
		Layers:       []oci.LayerBlob{{Desc: ld, Title: oci.BlobTitle("pkg-1.0-py3-none-any.whl"), Wheel: "pkg-1.0-py3-none-any.whl", WheelSHA256: hex.EncodeToString(make([]byte, 32))}},
		Annotations:  map[string]string{oci.AnnotationKind: "base", oci.AnnotationKey: seed},
	}
	mb, md, err := a.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		d v1.Descriptor
		b []byte
	}{{ld, blob.Bytes()}, {v1.Descriptor{MediaType: oci.MediaTypeLock, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))}, cfg}} {
		if _, err := s.PushBlob(ctx, b.d, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.b)), nil }); err != nil {
			t.Fatal(err)
		}
	}
	d, err := s.PushManifest(ctx, mb, md.MediaType, "base-"+seed)
	if err != nil {
		t.Fatal(err)
	}
	if d.Digest != md.Digest {
		t.Fatalf("pushed %s, want %s", d.Digest, md.Digest)
	}
	return d
}
