package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

var (
	wheelA = wheel{"a-1.0-py3-none-any.whl", map[string]string{
		"site-packages/a/__init__.py":            "print('a')\n",
		"site-packages/a/data/x.txt":             "x",
		"site-packages/a-1.0.dist-info/RECORD":   "a/__init__.py,,\n",
		"bin/a*":                                 "#!/opt/python/bin/python3\n",
		"site-packages/a-1.0.dist-info/METADATA": "Name: a\n",
	}}
	wheelB = wheel{"b-2.0-py3-none-any.whl", map[string]string{
		"site-packages/b.py":                     "B = 1\n",
		"site-packages/b-2.0.dist-info/RECORD":   "b.py,,\n",
		"site-packages/b-2.0.dist-info/METADATA": "Name: b\n",
	}}
	wheelC = wheel{"c-3.0-py3-none-any.whl", map[string]string{
		"site-packages/c.py": "C = 3\n",
	}}
)

func TestInstall(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	fx := s.add(artifact(t, "k1", wheelA, wheelB))
	var events []Event
	root, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, func(e Event) { events = append(events, e) })
	must(t, err)
	if want := filepath.Join(c.Root(), "layers", "sha256", fx.md.Encoded()); root != want {
		t.Fatalf("root = %q, want %q", root, want)
	}
	if got, ok := c.Layer(fx.md); !ok || got != root {
		t.Fatalf("Layer = %q, %v", got, ok)
	}
	// Every file is there, with its content, mode and the tree's inode.
	for _, w := range []wheel{wheelA, wheelB} {
		for p, content := range w.files {
			mode := os.FileMode(0o444)
			if strings.HasSuffix(p, "*") {
				p, mode = strings.TrimSuffix(p, "*"), 0o555
			}
			full := filepath.Join(root, p)
			b, err := os.ReadFile(full)
			must(t, err)
			if string(b) != content {
				t.Errorf("%s = %q, want %q", p, b, content)
			}
			fi, err := os.Lstat(full)
			must(t, err)
			if fi.Mode() != mode {
				t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
			}
			var tree string
			for _, l := range fx.layers {
				if oci.LayerWheel(l) == w.title {
					tree = c.treeDir(l.Digest.Encoded())
				}
			}
			ti, err := os.Lstat(filepath.Join(tree, p))
			must(t, err)
			if !os.SameFile(fi, ti) {
				t.Errorf("%s is not a hardlink into its tree", p)
			}
		}
	}
	for _, d := range []string{".", "site-packages", "site-packages/a", "bin", ".pylayer"} {
		fi, err := os.Lstat(filepath.Join(root, d))
		must(t, err)
		if fi.Mode() != os.ModeDir|0o555 {
			t.Errorf("%s: mode %v, want dr-xr-xr-x", d, fi.Mode())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, ".pylayer", "manifest.json")); !bytes.Equal(b, fx.manifest) {
		t.Errorf(".pylayer/manifest.json differs from the manifest")
	}
	m, _ := oci.ParseManifest(fx.manifest)
	if b, _ := os.ReadFile(filepath.Join(root, ".pylayer", "lock.json")); !bytes.Equal(b, fx.blobs[m.Config.Digest]) {
		t.Errorf(".pylayer/lock.json differs from the config blob")
	}
	done := 0
	for _, e := range events {
		if e.Done {
			done++
			if e.Cached || e.Bytes != e.Total || e.Title == "" {
				t.Errorf("event %+v", e)
			}
		}
	}
	if done != 2 {
		t.Errorf("%d done events, want 2: %+v", done, events)
	}
	// The totals come first: one queued event per blob, with its size, before any other.
	if len(events) < 2 || !events[0].Queued || !events[1].Queued || events[0].Total+events[1].Total != m.Layers[0].Size+m.Layers[1].Size {
		t.Errorf("first events %+v, want one queued event per blob with the manifest's sizes", events[:min(2, len(events))])
	}
	for _, e := range events[2:] {
		if e.Queued {
			t.Errorf("a queued event after the first two: %+v", e)
		}
	}
	if n := names(t, filepath.Join(c.Root(), "tmp")); len(n) != 0 {
		t.Errorf("tmp/ not empty: %v", n)
	}
	assertConsistent(t, c)

	// Idempotent: nothing fetched again.
	before := s.total()
	root2, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil)
	must(t, err)
	if root2 != root || s.total() != before {
		t.Errorf("second install: root %q, %d more fetches", root2, s.total()-before)
	}

	// Another layer sharing a blob fetches only what is new.
	fx2 := s.add(artifact(t, "k2", wheelB, wheelC))
	events = nil
	_, err = c.Install(ctx, fx2.md, fx2.manifest, s.fetch, func(e Event) { events = append(events, e) })
	must(t, err)
	for _, l := range fx2.layers {
		if n := s.count(l.Digest); n != 1 {
			t.Errorf("blob %s fetched %d times, want 1", l.Annotations[v1.AnnotationTitle], n)
		}
	}
	cached := 0
	for _, e := range events {
		if e.Cached {
			cached++
		}
	}
	if cached != 1 {
		t.Errorf("%d cached events, want 1 (b): %+v", cached, events)
	}
	assertConsistent(t, c)
}

func TestInstallConflict(t *testing.T) {
	c := openCache(t)
	s := newStore()
	other := wheel{"evil-1.0-py3-none-any.whl", map[string]string{"site-packages/a/__init__.py": "other"}}
	fx := s.add(artifact(t, "k", wheelA, other))
	_, err := c.Install(context.Background(), fx.md, fx.manifest, s.fetch, nil)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), wheelA.title) || !strings.Contains(err.Error(), other.title) ||
		!strings.Contains(err.Error(), "site-packages/a/__init__.py") {
		t.Fatalf("err = %v, want ErrConflict naming both wheels and the path", err)
	}
	if n := names(t, filepath.Join(c.Root(), "layers", "sha256")); len(n) != 0 {
		t.Errorf("layers/ = %v, want empty", n)
	}
	if n := names(t, filepath.Join(c.Root(), "tmp")); len(n) != 0 {
		t.Errorf("tmp/ = %v, want empty", n)
	}
	// A file where another wheel has a directory conflicts too.
	fileVsDir := wheel{"f-1.0-py3-none-any.whl", map[string]string{"site-packages/a": "not a dir"}}
	fx = s.add(artifact(t, "k2", wheelA, fileVsDir))
	if _, err := c.Install(context.Background(), fx.md, fx.manifest, s.fetch, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("file over directory: err = %v, want ErrConflict", err)
	}
}

func TestInstallRefuses(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	fx := s.add(artifact(t, "k", wheelA))
	corrupt := func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
		rc, err := s.fetch(ctx, d)
		if err != nil || d.MediaType == oci.MediaTypeLock {
			return rc, err
		}
		b, _ := io.ReadAll(rc)
		b[len(b)/2] ^= 1
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	short := func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
		rc, err := s.fetch(ctx, d)
		return io.NopCloser(io.LimitReader(rc, d.Size-1)), err
	}
	long := func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
		rc, err := s.fetch(ctx, d)
		return io.NopCloser(io.MultiReader(rc, strings.NewReader("more"))), err
	}
	failing := func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
		return nil, errors.New("registry says no")
	}
	withManifest := func(mutate func(m map[string]any)) (digest.Digest, []byte) {
		m := map[string]any{}
		must(t, jsonUnmarshal(fx.manifest, &m))
		mutate(m)
		b := jsonMarshal(t, m)
		return digest.FromBytes(b), b
	}
	wrongType, wrongTypeB := withManifest(func(m map[string]any) { m["artifactType"] = "application/vnd.other" })
	bzip2, bzip2B := withManifest(func(m map[string]any) {
		m["layers"].([]any)[0].(map[string]any)["mediaType"] = "application/vnd.oci.image.layer.v1.tar+bzip2"
	})
	mislabelled, mislabelledB := withManifest(func(m map[string]any) { // a gzip'd blob said to be zstd
		m["layers"].([]any)[0].(map[string]any)["mediaType"] = v1.MediaTypeImageLayerZstd
	})
	twice, twiceB := withManifest(func(m map[string]any) {
		ls := m["layers"].([]any)
		m["layers"] = append(ls, ls[0])
	})
	tests := []struct {
		name     string
		md       digest.Digest
		manifest []byte
		fetch    Fetch
		opts     []Option
		want     error
		msg      string
	}{
		{"manifest digest mismatch", digest.FromString("other"), fx.manifest, s.fetch, nil, oci.ErrDigestMismatch, "hash to"},
		{"not sha256", digest.Digest("sha512:" + strings.Repeat("a", 128)), fx.manifest, s.fetch, nil, nil, "sha256"},
		{"not a pylayer artifact", wrongType, wrongTypeB, s.fetch, nil, oci.ErrInvalidManifest, "application/vnd.other"},
		{"bzip2 layer", bzip2, bzip2B, s.fetch, nil, oci.ErrInvalidManifest, "tar+bzip2"},
		{"gzip layer said to be zstd", mislabelled, mislabelledB, s.fetch, nil, ErrUnsafeArchive, "magic number"},
		{"blob listed twice", twice, twiceB, s.fetch, nil, oci.ErrInvalidManifest, "twice"},
		{"not a manifest", digest.FromString("{}"), []byte("{}"), s.fetch, nil, oci.ErrInvalidManifest, "schemaVersion"},
		{"corrupt blob", fx.md, fx.manifest, corrupt, nil, oci.ErrDigestMismatch, wheelA.title},
		{"short blob", fx.md, fx.manifest, short, nil, oci.ErrSizeMismatch, "bytes"},
		{"long blob", fx.md, fx.manifest, long, nil, oci.ErrSizeMismatch, "more than"},
		{"fetch fails", fx.md, fx.manifest, failing, nil, nil, "registry says no"},
		{"blob too large", fx.md, fx.manifest, s.fetch, []Option{WithLimits(Limits{MaxBlobBytes: 10})}, ErrTooLarge, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := openCache(t, tt.opts...)
			_, err := c.Install(ctx, tt.md, tt.manifest, tt.fetch, nil)
			if err == nil || tt.want != nil && !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.want, tt.msg)
			}
			assertNothingLeft(t, c)
		})
	}
}

func TestInstallCanceled(t *testing.T) {
	c := openCache(t)
	s := newStore()
	fx := s.add(artifact(t, "k", wheelA, wheelB, wheelC))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	assertNothingLeft(t, c)
}

func TestConfigLimitMatchesLock(t *testing.T) {
	if maxConfigBytes != lock.MaxBytes {
		t.Fatalf("maxConfigBytes = %d, lock.MaxBytes = %d: keep them equal", maxConfigBytes, lock.MaxBytes)
	}
}
