package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// This file is the multi-platform artifact: an OCI image index (not the layout's
// index.json, which is index.go) whose entries are pylayer artifacts of the same
// requirements locked for different platforms, so that one tag holds them all and a
// host pulls its own (SelectPlatform).
//
// Entries of one index differ by Platform (os, architecture, variant and libc), for
// layers and interpreters alike: pull picks by platform only, so two entries of one
// platform (two Pythons, say) would leave it nothing to decide by. The Python version is
// part of a lock's key and tag; publish different Pythons under different tags.

// MediaTypeDockerManifestList is Docker's older image index, which a registry may hold
// for a tag; pylayer reads it like an OCI image index.
const MediaTypeDockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"

// ErrNoPlatform: an image index has no entry for the platform asked for.
var ErrNoPlatform = errors.New("no entry for the platform")

// IsIndex reports whether mediaType is an image index's (OCI's or Docker's list).
func IsIndex(mediaType string) bool {
	return mediaType == v1.MediaTypeImageIndex || mediaType == MediaTypeDockerManifestList
}

// entryAnnotations are the manifest annotations an index entry repeats.
var entryAnnotations = []string{AnnotationKind, AnnotationKey, AnnotationPython, AnnotationPlatform}

// IndexEntry is one platform's artifact in a PlatformIndex.
type IndexEntry struct {
	Desc     v1.Descriptor // the artifact's manifest: media type, artifactType, digest and size
	Platform Platform      // from its dev.pylayer.platform annotation (PlatformOf)
	// Annotations are the manifest's kind, key, python and platform tag.
	Annotations map[string]string
	Created     string // the manifest's org.opencontainers.image.created ("" if none)
}

// EntryOf is the index entry of the pylayer artifact whose manifest bytes are raw: its
// descriptor, its platform (PlatformOf its dev.pylayer.platform) and the annotations an
// entry repeats. Errors wrap ErrInvalidManifest or ErrUnknownPlatform.
func EntryOf(raw []byte) (IndexEntry, error) {
	m, err := ParseManifest(raw)
	if err != nil {
		return IndexEntry{}, err
	}
	if m.ArtifactType != ArtifactTypeLayer && m.ArtifactType != ArtifactTypePython {
		return IndexEntry{}, fmt.Errorf("%w: artifactType %q is not a pylayer artifact's", ErrInvalidManifest, m.ArtifactType)
	}
	tag := m.Annotations[AnnotationPlatform]
	p, err := PlatformOf(tag)
	if err != nil {
		return IndexEntry{}, fmt.Errorf("manifest %s: %w", digest.FromBytes(raw), err)
	}
	e := IndexEntry{
		Desc:        v1.Descriptor{MediaType: v1.MediaTypeImageManifest, ArtifactType: m.ArtifactType, Digest: digest.FromBytes(raw), Size: int64(len(raw))},
		Platform:    p,
		Annotations: map[string]string{},
		Created:     m.Annotations[v1.AnnotationCreated],
	}
	for _, k := range entryAnnotations {
		if v := m.Annotations[k]; v != "" {
			e.Annotations[k] = v
		}
	}
	return e, nil
}

// PlatformIndex is a multi-platform artifact before it is stored: one entry per platform.
type PlatformIndex struct {
	Entries []IndexEntry
}

// Encode returns the OCI image index of x, its bytes and its descriptor. The bytes depend
// only on the set of entries: schemaVersion 2, the index media type, the entries'
// artifactType, one descriptor per entry sorted by platform, each with its OCI platform
// and its annotations plus dev.pylayer.libc, and the index's annotations: the entries'
// kind and the newest entry's created time (CreatedEpoch when none has one). Entries must
// be of one artifactType and kind and differ by platform. Errors wrap ErrInvalidArtifact.
func (x PlatformIndex) Encode() ([]byte, v1.Descriptor, error) {
	bad := func(format string, args ...any) ([]byte, v1.Descriptor, error) {
		return nil, v1.Descriptor{}, fmt.Errorf("%w: image index: %s", ErrInvalidArtifact, fmt.Sprintf(format, args...))
	}
	if len(x.Entries) == 0 {
		return bad("no entries")
	}
	entries := append([]IndexEntry(nil), x.Entries...)
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Platform.less(entries[j].Platform) })
	first := entries[0]
	created := ""
	idx := v1.Index{
		Versioned:    v1.Versioned{SchemaVersion: 2},
		MediaType:    v1.MediaTypeImageIndex,
		ArtifactType: first.Desc.ArtifactType,
		Manifests:    make([]v1.Descriptor, 0, len(entries)),
	}
	for i, e := range entries {
		if err := checkDescriptor(e.Desc); err != nil {
			return bad("entry %s: %v", e.Platform, err)
		}
		if e.Desc.MediaType != v1.MediaTypeImageManifest {
			return bad("entry %s: media type %q is not an image manifest's", e.Platform, e.Desc.MediaType)
		}
		if e.Desc.ArtifactType != first.Desc.ArtifactType || e.Annotations[AnnotationKind] != first.Annotations[AnnotationKind] {
			return bad("entry %s is a %s %q and entry %s a %s %q: one index holds one kind of artifact",
				e.Platform, e.Desc.ArtifactType, e.Annotations[AnnotationKind], first.Platform, first.Desc.ArtifactType, first.Annotations[AnnotationKind])
		}
		if e.Platform.OS == "" || e.Platform.Architecture == "" || e.Platform.Libc == "" {
			return bad("entry %s: the platform needs os, architecture and libc", e.Desc.Digest)
		}
		if i > 0 && e.Platform == entries[i-1].Platform {
			return bad("entries %s and %s are both for %s: entries of one index differ by platform (publish different Pythons under different tags)", entries[i-1].Desc.Digest, e.Desc.Digest, e.Platform)
		}
		if e.Created != "" {
			if _, err := time.Parse(time.RFC3339, e.Created); err != nil {
				return bad("entry %s: created %q is not RFC 3339", e.Platform, e.Created)
			}
			if e.Created > created { // same layout (UTC, to the second): strings order as times
				created = e.Created
			}
		}
		ann := map[string]string{AnnotationLibc: e.Platform.Libc}
		for _, k := range entryAnnotations {
			if v := e.Annotations[k]; v != "" {
				ann[k] = v
			}
		}
		idx.Manifests = append(idx.Manifests, v1.Descriptor{
			MediaType:    e.Desc.MediaType,
			ArtifactType: e.Desc.ArtifactType,
			Digest:       e.Desc.Digest,
			Size:         e.Desc.Size,
			Platform:     &v1.Platform{OS: e.Platform.OS, Architecture: e.Platform.Architecture, Variant: e.Platform.Variant},
			Annotations:  ann,
		})
	}
	if created == "" {
		created = CreatedEpoch
	}
	idx.Annotations = map[string]string{v1.AnnotationCreated: created}
	if k := first.Annotations[AnnotationKind]; k != "" {
		idx.Annotations[AnnotationKind] = k
	}
	b, err := json.Marshal(idx)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("encoding image index: %w", err)
	}
	return b, v1.Descriptor{MediaType: v1.MediaTypeImageIndex, ArtifactType: idx.ArtifactType, Digest: digest.FromBytes(b), Size: int64(len(b))}, nil
}

// ParseIndex decodes and checks the bytes of an image index (OCI's, or Docker's manifest
// list): schemaVersion 2, an index media type if set, and a valid sha256 digest and size
// in every entry. It does not check that the bytes hash to any digest. Errors wrap
// ErrInvalidManifest.
func ParseIndex(b []byte) (*v1.Index, error) {
	if len(b) > maxManifestSize {
		return nil, fmt.Errorf("%w: image index of %d bytes, the limit is %d", ErrInvalidManifest, len(b), maxManifestSize)
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%w: image index: decoding JSON: %v", ErrInvalidManifest, err)
	}
	if idx.SchemaVersion != 2 {
		return nil, fmt.Errorf("%w: image index: schemaVersion is %d, want 2", ErrInvalidManifest, idx.SchemaVersion)
	}
	if idx.MediaType != "" && !IsIndex(idx.MediaType) {
		return nil, fmt.Errorf("%w: image index: mediaType is %q, want %q", ErrInvalidManifest, idx.MediaType, v1.MediaTypeImageIndex)
	}
	for i, m := range idx.Manifests {
		if err := checkDescriptor(m); err != nil {
			return nil, fmt.Errorf("%w: image index: manifests[%d]: %v", ErrInvalidManifest, i, err)
		}
	}
	return &idx, nil
}

// EntryPlatform is the Platform of an index entry: its OCI platform and its
// dev.pylayer.libc (glibc when absent). ok is false for an entry without a platform.
func EntryPlatform(d v1.Descriptor) (p Platform, ok bool) {
	if d.Platform == nil {
		return Platform{}, false
	}
	p = Platform{OS: d.Platform.OS, Architecture: d.Platform.Architecture, Variant: d.Platform.Variant, Libc: d.Annotations[AnnotationLibc]}
	if p.Libc == "" {
		p.Libc = LibcGlibc
	}
	return p, true
}

// SelectPlatform returns the entry of idx for want: an image manifest whose platform has
// want's os, architecture and libc, and want's variant unless want names none. No entry
// is an error wrapping ErrNoPlatform that lists the platforms idx has; two are an error
// too, as nothing says which to use.
func SelectPlatform(idx *v1.Index, want Platform) (v1.Descriptor, error) {
	var found []v1.Descriptor
	var have []string
	for _, d := range idx.Manifests {
		p, ok := EntryPlatform(d)
		if !ok || d.MediaType != "" && d.MediaType != v1.MediaTypeImageManifest && d.MediaType != "application/vnd.docker.distribution.manifest.v2+json" {
			continue
		}
		name := p.String()
		if tag := d.Annotations[AnnotationPlatform]; tag != "" {
			name += " (" + tag + ")"
		}
		have = append(have, name)
		if p.OS == want.OS && p.Architecture == want.Architecture && p.Libc == want.Libc && (want.Variant == "" || p.Variant == want.Variant) {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return v1.Descriptor{}, fmt.Errorf("the image index has %d entries for %s (%s): name one by digest", len(found), want, strings.Join(have, ", "))
	case len(have) == 0:
		return v1.Descriptor{}, fmt.Errorf("%w %s: the image index has no entries with a platform", ErrNoPlatform, want)
	}
	return v1.Descriptor{}, fmt.Errorf("%w %s: the image index has %s: pull one of those with --platform, or publish the lock for %s into the index",
		ErrNoPlatform, want, strings.Join(have, ", "), want)
}
