package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// putBlobs bounds the blobs one Put writes at a time.
const putBlobs = 16

// Put stores a in the layout and points tag at it: the config blob, each
// layer blob (read from LayerBlob.Path and verified against its descriptor;
// skipped when already present) and the manifest, a few at a time, and
// finally, once they are all in place, an index.json
// entry annotated org.opencontainers.image.ref.name = tag, replacing any entry
// with the same tag. index.json is rewritten atomically under a lock file, so
// concurrent Puts of different tags keep all of them; entries are sorted by
// tag. It returns the index entry.
func (l *Layout) Put(ctx context.Context, a Artifact, tag string) (v1.Descriptor, error) {
	if err := ValidTag(tag); err != nil {
		return v1.Descriptor{}, err
	}
	mb, mdesc, err := a.Manifest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("putting %s: %w", tag, err)
	}
	cfg := v1.Descriptor{MediaType: ConfigMediaType(a.ArtifactType), Digest: digest.FromBytes(a.Config), Size: int64(len(a.Config))}
	// The blobs are written at once: their fsyncs share the file system's commits instead
	// of waiting for one each. The tag comes after all of them.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(putBlobs)
	g.Go(func() error {
		if err := l.WriteBlob(gctx, bytes.NewReader(a.Config), cfg); err != nil {
			return fmt.Errorf("putting %s: config: %w", tag, err)
		}
		return nil
	})
	for _, lb := range a.Layers {
		g.Go(func() error {
			if err := l.PutLayerBlob(gctx, lb); err != nil {
				return fmt.Errorf("putting %s: layer %s: %w", tag, lb.Title, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		if err := l.WriteBlob(gctx, bytes.NewReader(mb), mdesc); err != nil {
			return fmt.Errorf("putting %s: manifest: %w", tag, err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return v1.Descriptor{}, err
	}
	mdesc.Annotations = map[string]string{v1.AnnotationRefName: tag}
	if err := l.Tag(ctx, mdesc, tag); err != nil {
		return v1.Descriptor{}, fmt.Errorf("putting %s: %w", tag, err)
	}
	return mdesc, nil
}

// Tag points tag at entry (a manifest already in the layout) in index.json, replacing the
// entry that had the tag. index.json is rewritten atomically under the index lock, so
// concurrent taggers keep every tag; entries are sorted by tag.
func (l *Layout) Tag(ctx context.Context, entry v1.Descriptor, tag string) error {
	if err := ValidTag(tag); err != nil {
		return err
	}
	entry.Annotations = map[string]string{v1.AnnotationRefName: tag}
	err := l.withIndexLock(ctx, func() error {
		idx, err := l.readIndex()
		if err != nil {
			return err
		}
		kept := idx.Manifests[:0]
		for _, m := range idx.Manifests {
			if m.Annotations[v1.AnnotationRefName] != tag {
				kept = append(kept, m)
			}
		}
		idx.Manifests = append(kept, entry)
		b, err := marshalIndex(idx)
		if err != nil {
			return err
		}
		return writeAtomic(ctx, l.Dir, indexFile, b)
	})
	if err != nil {
		return fmt.Errorf("tagging %s: updating %s: %w", tag, indexFile, err)
	}
	return nil
}

// PutLayerBlob writes a layer blob file into the layout, its digest checked as it is
// copied, unless the layout has it already. A blob no manifest names yet is harmless: Put
// writes the manifest and the tag after every blob.
func (l *Layout) PutLayerBlob(ctx context.Context, lb LayerBlob) error {
	if size, ok := l.blobSize(lb.Desc.Digest); ok && size == lb.Desc.Size {
		return nil
	}
	f, err := os.Open(lb.Path)
	if err != nil {
		return fmt.Errorf("opening layer blob file: %w", err)
	}
	defer f.Close()
	return l.WriteBlob(ctx, f, lb.Desc)
}

// Resolve returns the index entry tagged tag. A missing tag wraps ErrNotFound.
func (l *Layout) Resolve(ctx context.Context, tag string) (v1.Descriptor, error) {
	if err := ValidTag(tag); err != nil {
		return v1.Descriptor{}, err
	}
	if err := ctx.Err(); err != nil {
		return v1.Descriptor{}, err
	}
	idx, err := l.readIndex()
	if err != nil {
		return v1.Descriptor{}, err
	}
	var found []v1.Descriptor
	for _, m := range idx.Manifests {
		if m.Annotations[v1.AnnotationRefName] == tag {
			found = append(found, m)
		}
	}
	switch {
	case len(found) == 0:
		return v1.Descriptor{}, fmt.Errorf("tag %s: %w in layout %q", tag, ErrNotFound, l.Dir)
	case len(found) > 1:
		return v1.Descriptor{}, fmt.Errorf("%w: %q: tag %s names %d entries in %s; re-put it to fix the index", ErrInvalidLayout, l.Dir, tag, len(found), indexFile)
	}
	return found[0], nil
}

// Manifest reads the manifest blob with digest d, verifies the digest and
// parses it with ParseManifest. It returns the parsed manifest and its bytes.
func (l *Layout) Manifest(ctx context.Context, d digest.Digest) (*v1.Manifest, []byte, error) {
	b, err := l.readBlob(ctx, d, maxManifestSize)
	if err != nil {
		return nil, nil, fmt.Errorf("reading manifest: %w", err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, nil, fmt.Errorf("manifest %s in layout %q: %w", d, l.Dir, err)
	}
	return m, b, nil
}

func (l *Layout) readIndex() (*v1.Index, error) {
	b, err := os.ReadFile(filepath.Join(l.Dir, indexFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidLayout, l.Dir, err)
	}
	idx, err := parseIndex(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %s: %v", ErrInvalidLayout, l.Dir, indexFile, err)
	}
	return idx, nil
}

// parseIndex decodes and checks index.json bytes: schemaVersion 2, the image
// index media type if set, and a valid sha256 digest and size in each entry.
func parseIndex(b []byte) (*v1.Index, error) {
	if len(b) > maxManifestSize {
		return nil, fmt.Errorf("%d bytes, the limit is %d", len(b), maxManifestSize)
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("decoding JSON: %w", err)
	}
	if idx.SchemaVersion != 2 {
		return nil, fmt.Errorf("schemaVersion is %d, want 2", idx.SchemaVersion)
	}
	if idx.MediaType != "" && idx.MediaType != v1.MediaTypeImageIndex {
		return nil, fmt.Errorf("mediaType is %q, want %q", idx.MediaType, v1.MediaTypeImageIndex)
	}
	for i, m := range idx.Manifests {
		if err := checkDescriptor(m); err != nil {
			return nil, fmt.Errorf("manifests[%d]: %w", i, err)
		}
	}
	return &idx, nil
}

// marshalIndex encodes idx (nil: an empty index) with its entries sorted by
// tag, then digest, so the bytes depend only on the set of entries.
func marshalIndex(idx *v1.Index) ([]byte, error) {
	if idx == nil {
		idx = &v1.Index{}
	}
	out := *idx
	out.SchemaVersion = 2
	out.MediaType = v1.MediaTypeImageIndex
	out.Manifests = append([]v1.Descriptor{}, idx.Manifests...)
	sort.SliceStable(out.Manifests, func(i, j int) bool {
		ti, tj := out.Manifests[i].Annotations[v1.AnnotationRefName], out.Manifests[j].Annotations[v1.AnnotationRefName]
		if ti != tj {
			return ti < tj
		}
		return out.Manifests[i].Digest < out.Manifests[j].Digest
	})
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", indexFile, err)
	}
	return b, nil
}
