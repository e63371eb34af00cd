package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/wheel"
)

// LayerArtifact builds (or reuses) the trees of l's wheels, packs each into a reproducible
// layer blob cached beside the trees, and returns the artifact of the lock.
//
// l must be stamped by b (build.Builder.Stamp): its CompiledBy must name the interpreter
// b compiles .pyc with, or be "" when b compiles none. The .pyc are part of the blobs'
// bytes, and so is the config's compiled_by part of the key: one key has one digest.
func LayerArtifact(ctx context.Context, b *build.Builder, l *lock.Lock) (Artifact, error) {
	return LayerArtifactWith(ctx, b, l, nil)
}

// LayerArtifactWith is LayerArtifact that also calls onBlob (unless nil) with each layer
// blob as soon as it is packed, while the other trees install: a build into a layout
// writes each blob there then (Layout.PutLayerBlob), not all of them after the last.
// onBlob runs in the packing worker, so it must be safe for concurrent use; its error
// ends the build.
func LayerArtifactWith(ctx context.Context, b *build.Builder, l *lock.Lock, onBlob func(context.Context, LayerBlob) error) (Artifact, error) {
	by, err := b.CompiledBy(ctx)
	if err != nil {
		return Artifact{}, err
	}
	if l.CompiledBy != by {
		return Artifact{}, fmt.Errorf("the lock says its .pyc are compiled by %q, the builder compiles with %q: stamp the lock with the builder (build.Builder.Stamp) before taking its key", l.CompiledBy, by)
	}
	// The config is the lock's content, without the index URLs it was fetched from, so
	// the same wheels from any mirror give one key and one config digest.
	canon, err := l.Content()
	if err != nil {
		return Artifact{}, err
	}
	// The creation time is $SOURCE_DATE_EPOCH when set (checked before anything is
	// built), else the newest wheel's, read beside each tree's packing.
	epoch, fixed, err := SourceDateEpoch()
	if err != nil {
		return Artifact{}, err
	}
	// Each tree is packed as soon as it is installed, while the others install.
	blobs := make([]LayerBlob, len(l.Packages))
	built := make([]time.Time, len(l.Packages))
	err = b.EachTree(ctx, l, func(ctx context.Context, i int, t build.Tree) error {
		lb, err := treeBlob(ctx, filepath.Join(b.Root, "blobs"), t)
		if err != nil {
			return fmt.Errorf("packing %s: %w", t.Package.Filename, err)
		}
		blobs[i] = lb
		if onBlob != nil {
			if err := onBlob(ctx, lb); err != nil {
				return fmt.Errorf("layer blob of %s: %w", t.Package.Filename, err)
			}
		}
		if !fixed {
			if built[i], err = wheelBuiltAt(ctx, b, t.Package); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Artifact{}, err
	}
	ann := map[string]string{
		AnnotationKind:     string(l.Kind),
		AnnotationKey:      lock.KeyOf(canon),
		AnnotationPython:   l.Target.Python,
		AnnotationPlatform: l.Target.Platform,
	}
	if l.Base != "" {
		ann[AnnotationBase] = l.Base
	}
	created := epoch
	if !fixed {
		created = newest(built)
	}
	return Artifact{ArtifactType: ArtifactTypeLayer, Config: canon, Layers: blobs, Annotations: ann, Created: created}, nil
}

// wheelBuiltAt is p's wheel.BuiltAt: without $SOURCE_DATE_EPOCH (the reproducible-builds
// convention, for a CI that stamps a release) a layer is as new as its newest wheel, so
// that the same lock gives the same manifest bytes on any host and the time still says
// how fresh it is. The wheel is in the builder's wheelhouse once its tree is built: one
// read of its central directory.
func wheelBuiltAt(ctx context.Context, b *build.Builder, p lock.Package) (time.Time, error) {
	whl, err := b.Wheel(ctx, p)
	if err != nil {
		return time.Time{}, err
	}
	return wheel.BuiltAt(whl)
}

// newest is the latest of ts, the zero time (CreatedEpoch) when none is after 1970.
func newest(ts []time.Time) time.Time {
	var n time.Time
	for _, t := range ts {
		if t.After(n) {
			n = t
		}
	}
	if n.Before(time.Unix(0, 0)) {
		return time.Time{}
	}
	return n
}

// SourceDateEpoch reads $SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/):
// its time and true when set, an error naming the variable when it is not a decimal
// count of seconds since 1970 (a build stamped with a wrong time is worse than none).
func SourceDateEpoch() (time.Time, bool, error) {
	v, ok := os.LookupEnv("SOURCE_DATE_EPOCH")
	if !ok || v == "" {
		return time.Time{}, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > 253402300799 {
		return time.Time{}, false, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want the seconds since 1970-01-01 UTC as a decimal integer (e.g. $(git log -1 --format=%%ct))", v)
	}
	return time.Unix(n, 0).UTC(), true, nil
}

// treeBlob packs a tree once: the blob and its descriptor are cached under dir by tree key.
func treeBlob(ctx context.Context, dir string, t build.Tree) (LayerBlob, error) {
	blob := filepath.Join(dir, t.Key+".tar.gz")
	meta := filepath.Join(dir, t.Key+".json")
	lb := LayerBlob{Path: blob, Title: BlobTitle(t.Package.Filename), Wheel: t.Package.Filename, WheelSHA256: t.Package.SHA256}
	if b, err := os.ReadFile(meta); err == nil {
		if json.Unmarshal(b, &lb.Desc) == nil {
			if fi, err := os.Stat(blob); err == nil && fi.Size() == lb.Desc.Size {
				return lb, nil
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return lb, err
	}
	w, err := fsx.Create(ctx, blob, 0o600)
	if err != nil {
		return lb, err
	}
	defer w.Cleanup()
	desc, _, err := tarTree(ctx, t.Dir, w, TarTreeOptions{}, false) // the DiffID is not kept
	if err != nil {
		return lb, err
	}
	lb.Desc = desc
	b, err := json.Marshal(desc)
	if err != nil {
		return lb, err
	}
	m, err := fsx.Create(ctx, meta, 0o644)
	if err != nil {
		return lb, err
	}
	defer m.Cleanup()
	if _, err := m.Write(b); err != nil {
		return lb, fmt.Errorf("writing %s: %w", meta, err)
	}
	// Both at once, so that their flushes share the file system's commits. The descriptor
	// may be in place before the blob: one whose blob is missing or of another size is
	// not trusted above.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Commit(gctx) })
	g.Go(func() error { return m.Commit(gctx) })
	return lb, g.Wait()
}
