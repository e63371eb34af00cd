package registry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Open opens the repository ref names (its tag and digest are ignored): an OCI layout for
// "oci:" references, else a registry repository, which Open pings and authenticates
// against for pulling (pushing authenticates on first use).
func Open(ctx context.Context, ref Ref, opts Options) (Repo, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case ref.Layout != "" && ref.Repo != "":
		return nil, fmt.Errorf("%w: %s: both a layout and a repository are set", ErrInvalidRef, ref)
	case ref.Layout != "":
		return openLayoutRepo(ref, o)
	case ref.Repo != "":
		r, err := ParseRef(ref.Repo)
		if err != nil || r.Repo != ref.Repo {
			return nil, fmt.Errorf("%w: repository %q (parse references with ParseRef)", ErrInvalidRef, ref.Repo)
		}
		return openRemote(ctx, ref, o)
	}
	return nil, fmt.Errorf("%w: empty reference", ErrInvalidRef)
}

// ResolveRef returns the descriptor and bytes of the manifest ref names: by digest when it
// has one (Tag is then only for display), else by resolving its tag.
func ResolveRef(ctx context.Context, r Repo, ref Ref) (v1.Descriptor, []byte, error) {
	var d v1.Descriptor
	switch {
	case ref.Digest != "":
		d = v1.Descriptor{Digest: ref.Digest}
	case ref.Tag != "":
		var err error
		if d, err = r.Resolve(ctx, ref.Tag); err != nil {
			return v1.Descriptor{}, nil, err
		}
	default:
		return v1.Descriptor{}, nil, fmt.Errorf("%w: %s names no tag or digest", ErrInvalidRef, ref)
	}
	raw, err := r.Manifest(ctx, d)
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	d.Size = int64(len(raw))
	if d.MediaType == "" {
		if m, err := oci.ParseManifest(raw); err == nil {
			d.MediaType = v1.MediaTypeImageManifest
			d.ArtifactType = m.ArtifactType
		}
	}
	return d, raw, nil
}

// PushStats counts the blobs of one Push or Copy. Skipped blobs were present already or
// mounted from Options.MountFrom.
type PushStats struct {
	Blobs         int   `json:"blobs"`
	Uploaded      int   `json:"uploaded"`
	Skipped       int   `json:"skipped"`
	BytesUploaded int64 `json:"bytes_uploaded"`
}

// blob is one blob to transfer and how to read it.
type blob struct {
	desc v1.Descriptor
	open func() (io.ReadCloser, error)
}

// Push stores artifact a in r under tag ("" for by digest only): the config and layer blobs
// first, Options.Jobs at a time, each skipped when r has it, then the manifest, so a tag
// never points at missing blobs. Running it again after a failure completes the push.
func Push(ctx context.Context, r Repo, a oci.Artifact, tag string) (v1.Descriptor, PushStats, error) {
	raw, mdesc, err := a.Manifest()
	if err != nil {
		return v1.Descriptor{}, PushStats{}, fmt.Errorf("pushing to %s: %w", r.Name(), err)
	}
	if tag != "" {
		if err := oci.ValidTag(tag); err != nil {
			return v1.Descriptor{}, PushStats{}, fmt.Errorf("pushing to %s: %w", r.Name(), err)
		}
	}
	cfg := a.Config
	blobs := []blob{{
		desc: v1.Descriptor{MediaType: oci.ConfigMediaType(a.ArtifactType), Digest: digest.FromBytes(cfg), Size: int64(len(cfg))},
		open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(cfg)), nil },
	}}
	for _, l := range a.Layers {
		path := l.Path
		blobs = append(blobs, blob{desc: l.Desc, open: func() (io.ReadCloser, error) { return os.Open(path) }})
	}
	return pushAll(ctx, r, blobs, raw, mdesc.MediaType, tag)
}

// Copy copies the manifest d of src, with its config and layer blobs, into dst under tag
// ("" for by digest only). Blobs are verified as they are read from src.
func Copy(ctx context.Context, src, dst Repo, d v1.Descriptor, tag string) (v1.Descriptor, PushStats, error) {
	raw, err := src.Manifest(ctx, d)
	if err != nil {
		return v1.Descriptor{}, PushStats{}, fmt.Errorf("copying %s@%s: %w", src.Name(), d.Digest, err)
	}
	m, err := oci.ParseManifest(raw)
	if err != nil {
		return v1.Descriptor{}, PushStats{}, fmt.Errorf("copying %s@%s: %w", src.Name(), d.Digest, err)
	}
	mt := d.MediaType
	if mt == "" {
		mt = v1.MediaTypeImageManifest
	}
	var blobs []blob
	for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		blobs = append(blobs, blob{desc: b, open: func() (io.ReadCloser, error) { return src.Blob(ctx, b) }})
	}
	return pushAll(ctx, dst, blobs, raw, mt, tag)
}

// jobser is implemented by this package's Repos to share Options.Jobs with Push and Copy.
type jobser interface{ jobs() int }

func pushAll(ctx context.Context, r Repo, blobs []blob, raw []byte, mediaType, tag string) (v1.Descriptor, PushStats, error) {
	jobs := defaultJobs
	if j, ok := r.(jobser); ok {
		jobs = j.jobs()
	}
	// Distinct blobs, in order.
	seen := map[digest.Digest]bool{}
	uniq := blobs[:0:0]
	for _, b := range blobs {
		if !seen[b.desc.Digest] {
			seen[b.desc.Digest] = true
			uniq = append(uniq, b)
		}
	}
	stats := PushStats{Blobs: len(uniq)}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, jobs)
	)
	for _, b := range uniq {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			uploaded, err := r.PushBlob(ctx, b.desc, b.open)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if firstErr == nil {
					firstErr = fmt.Errorf("pushing blob %s: %w", b.desc.Digest, err)
					cancel()
				}
			case uploaded:
				stats.Uploaded++
				stats.BytesUploaded += b.desc.Size
			default:
				stats.Skipped++
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return v1.Descriptor{}, stats, firstErr
	}
	desc, err := r.PushManifest(ctx, raw, mediaType, tag)
	if err != nil {
		return v1.Descriptor{}, stats, err
	}
	if want := digest.FromBytes(raw); desc.Digest != want {
		return v1.Descriptor{}, stats, fmt.Errorf("pushing to %s: %w: manifest stored as %s, want %s", r.Name(), ErrDigestMismatch, desc.Digest, want)
	}
	return desc, stats, nil
}

func (r *remoteRepo) jobs() int { return r.opts.Jobs }
func (r *layoutRepo) jobs() int { return r.jobsN }
