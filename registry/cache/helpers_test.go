package cache

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// wheel is one layer blob of a test artifact: a title and its files
// (path -> content; a path ending in "*" is executable, the "*" stripped).
type wheel struct {
	title string
	files map[string]string
}

// fixture is an artifact held in memory: manifest bytes and blobs.
type fixture struct {
	md       digest.Digest
	manifest []byte
	blobs    map[digest.Digest][]byte
	layers   []v1.Descriptor
}

// store holds the blobs of several fixtures and counts fetches.
type store struct {
	mu      sync.Mutex
	blobs   map[digest.Digest][]byte
	fetches map[digest.Digest]int
}

func newStore() *store {
	return &store{blobs: map[digest.Digest][]byte{}, fetches: map[digest.Digest]int{}}
}

func (s *store) add(fx fixture) fixture {
	s.mu.Lock()
	defer s.mu.Unlock()
	for d, b := range fx.blobs {
		s.blobs[d] = b
	}
	return fx
}

func (s *store) fetch(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[d.Digest]
	if !ok {
		return nil, fmt.Errorf("blob %s: %w", d.Digest, fs.ErrNotExist)
	}
	s.fetches[d.Digest]++
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (s *store) count(d digest.Digest) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches[d]
}

func (s *store) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.fetches {
		n += c
	}
	return n
}

// makeTree writes files under a new temporary directory.
func makeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, "*") {
			p, mode = strings.TrimSuffix(p, "*"), 0o755
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		must(t, os.MkdirAll(filepath.Dir(full), 0o755))
		must(t, os.WriteFile(full, []byte(content), mode))
		must(t, os.Chmod(full, mode))
	}
	return dir
}

// tarTree packs files with oci.TarTree, as publish does.
func tarTree(t testing.TB, files map[string]string) ([]byte, v1.Descriptor) {
	t.Helper()
	var buf bytes.Buffer
	desc, _, err := oci.TarTree(context.Background(), makeTree(t, files), &buf)
	must(t, err)
	return buf.Bytes(), desc
}

// artifact builds a pylayer artifact of wheels, as publish does.
func artifact(t testing.TB, key string, wheels ...wheel) fixture {
	t.Helper()
	blobs := map[digest.Digest][]byte{}
	var lbs []oci.LayerBlob
	for _, w := range wheels {
		b, desc := tarTree(t, w.files)
		blobs[desc.Digest] = b
		sum := sha256.Sum256([]byte(w.title))
		lbs = append(lbs, oci.LayerBlob{Desc: desc, Title: oci.BlobTitle(w.title), Wheel: w.title, WheelSHA256: hex.EncodeToString(sum[:])})
	}
	return rawArtifact(t, key, blobs, lbs)
}

// rawArtifact makes the manifest of prebuilt blobs (possibly malicious).
func rawArtifact(t testing.TB, key string, blobs map[digest.Digest][]byte, lbs []oci.LayerBlob) fixture {
	t.Helper()
	config := []byte(fmt.Sprintf(`{"version":1,"kind":"base","test":%q}`, key))
	a := oci.Artifact{
		ArtifactType: oci.ArtifactTypeLayer,
		Config:       config,
		Layers:       lbs,
		Annotations:  map[string]string{oci.AnnotationKind: "base", oci.AnnotationKey: key},
	}
	mb, desc, err := a.Manifest()
	must(t, err)
	blobs[digest.FromBytes(config)] = config
	fx := fixture{md: desc.Digest, manifest: mb, blobs: blobs}
	m, err := oci.ParseManifest(mb)
	must(t, err)
	fx.layers = m.Layers
	return fx
}

// blobOf wraps a raw (possibly malicious) tar.gz as a layer blob.
func blobOf(t testing.TB, title string, b []byte) (map[digest.Digest][]byte, []oci.LayerBlob) {
	d := digest.FromBytes(b)
	sum := sha256.Sum256([]byte(title))
	lb := oci.LayerBlob{
		Desc:        v1.Descriptor{MediaType: oci.MediaTypeLayer, Digest: d, Size: int64(len(b))},
		Title:       title,
		WheelSHA256: hex.EncodeToString(sum[:]),
	}
	if strings.HasSuffix(title, ".whl") {
		lb.Title, lb.Wheel = oci.BlobTitle(title), title
	}
	return map[digest.Digest][]byte{d: b}, []oci.LayerBlob{lb}
}

// entry is one raw tar entry for hand-built archives.
type entry struct {
	hdr     tar.Header
	content string
}

func reg(name, content string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}, content: content}
}

func dir(name string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}}
}

// rawTarGz writes entries with archive/tar, as an attacker would.
func rawTarGz(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := e.hdr
		must(t, tw.WriteHeader(&h))
		if e.content != "" {
			_, err := tw.Write([]byte(e.content))
			must(t, err)
		}
	}
	must(t, tw.Close())
	must(t, gz.Close())
	return buf.Bytes()
}

func randomBytes(t testing.TB, n int) string {
	b := make([]byte, n)
	_, err := rand.Read(b)
	must(t, err)
	return string(b)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openCache(t testing.TB, opts ...Option) *Cache {
	t.Helper()
	c, err := Open(cacheRoot(t), opts...)
	must(t, err)
	return c
}

// cacheRoot is a new cache directory, removed after the test although it
// holds read-only directories (t.TempDir's cleanup cannot, unless root).
func cacheRoot(t testing.TB) string {
	root := filepath.Join(t.TempDir(), "cache")
	t.Cleanup(func() { forceRemoveAll(root) })
	return root
}

// names lists a directory's entries, sorted.
func names(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// assertClean checks that nothing but complete trees and layers is visible
// and that tmp/ is empty.
func assertNothingLeft(t testing.TB, c *Cache) {
	t.Helper()
	for _, d := range []string{"trees/sha256", "layers/sha256", "tmp"} {
		if n := names(t, filepath.Join(c.Root(), d)); len(n) != 0 {
			t.Errorf("%s is not empty: %v", d, n)
		}
	}
}

// assertConsistent checks every visible tree and layer, as Doctor does.
func assertConsistent(t testing.TB, c *Cache) {
	t.Helper()
	rep, err := c.Doctor(context.Background(), false)
	must(t, err)
	if len(rep.Bad) != 0 {
		t.Errorf("doctor found damage: %q", rep.Bad)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func jsonMarshal(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	must(t, err)
	return b
}

func gzipWriter(w io.Writer) *gzip.Writer { return gzip.NewWriter(w) }
