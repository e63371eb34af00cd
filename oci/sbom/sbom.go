package sbom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/interp"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// ErrInvalid: the artifact cannot be described (a manifest that contradicts its config,
// a config that is not a lock or an interpreter config).
var ErrInvalid = errors.New("cannot describe the artifact")

// MaxBytes bounds the documents Parse reads.
const MaxBytes = 16 << 20

// Blobs opens the blobs a manifest names, checked against their descriptor or not (Generate
// checks them); registry.Repo satisfies it.
type Blobs interface {
	Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error)
}

// ArtifactBlobs are the layer blobs of a, read from their files: what publish pushes.
func ArtifactBlobs(a oci.Artifact) Blobs { return artifactBlobs(a) }

type artifactBlobs oci.Artifact

var _ Blobs = artifactBlobs{}

func (a artifactBlobs) Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	for _, l := range a.Layers {
		if l.Desc.Digest == d.Digest {
			return os.Open(l.Path)
		}
	}
	return nil, fmt.Errorf("blob %s: %w: not a layer of the artifact", d.Digest, oci.ErrNotFound)
}

// readers is how many layer blobs Generate reads at once.
const readers = 4

// Generate returns the SPDX 2.3 JSON document of the pylayer artifact whose manifest
// bytes are manifest and whose config blob is config (checked against the manifest),
// reading the METADATA of each wheel from the layer blobs through blobs (nil for an
// interpreter, whose document comes from its config alone).
//
// Everything in the document comes from the artifact's content, so the same artifact
// gives the same bytes wherever and whenever it is described: the document is named
// after the artifact's tag (<kind>-<key>, cpython-<version>-<key>) and its namespace
// after the manifest digest; the creation time is the manifest's
// org.opencontainers.image.created (the newest wheel's time, or SOURCE_DATE_EPOCH), the
// Unix epoch if it has none; download locations are NOASSERTION, since the lock in the
// config keeps no index URL. The bytes are compact JSON with object keys sorted, the
// form sign.NewStatement carries unchanged.
func Generate(ctx context.Context, manifest, config []byte, blobs Blobs) ([]byte, error) {
	m, err := oci.ParseManifest(manifest)
	if err != nil {
		return nil, err
	}
	if got := digest.FromBytes(config); got != m.Config.Digest {
		return nil, fmt.Errorf("%w: the config given is %s, the manifest names %s", ErrInvalid, got, m.Config.Digest)
	}
	subject := digest.FromBytes(manifest)
	var doc *Document
	switch m.ArtifactType {
	case oci.ArtifactTypeLayer:
		doc, err = layerDocument(ctx, m, config, subject, blobs)
	case oci.ArtifactTypePython:
		doc, err = interpreterDocument(m, config, subject)
	default:
		err = fmt.Errorf("%w: artifactType %q is not a pylayer layer or interpreter", ErrInvalid, m.ArtifactType)
	}
	if err != nil {
		return nil, err
	}
	doc.SPDXID, doc.SPDXVersion, doc.DataLicense = DocumentID, SPDXVersion, DataLicense
	doc.DocumentNamespace = "https://spdx.org/spdxdocs/pylayer-" + doc.Name + "-" + subject.Encoded()
	doc.CreationInfo = CreationInfo{Created: created(m), Creators: []string{Creator}}
	doc.Relationships = append([]Relationship{{DocumentID, "DESCRIBES", ArtifactID}}, doc.Relationships...)
	return canonical(doc)
}

// created is the manifest's creation time in SPDX's form, the Unix epoch without one.
func created(m *v1.Manifest) string {
	t := time.Unix(0, 0)
	if c, err := time.Parse(time.RFC3339, m.Annotations[v1.AnnotationCreated]); err == nil {
		t = c
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// canonical encodes doc with object keys sorted, as cosign re-encodes a predicate.
func canonical(doc *Document) ([]byte, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding SBOM: %w", err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("encoding SBOM: %w", err)
	}
	if b, err = json.Marshal(v); err != nil {
		return nil, fmt.Errorf("encoding SBOM: %w", err)
	}
	return b, nil
}

// Parse decodes an SPDX JSON document, such as the predicate of an attestation.
func Parse(b []byte) (*Document, error) {
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("SBOM of %d bytes: the limit is %d", len(b), MaxBytes)
	}
	var d Document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("decoding SBOM: %w", err)
	}
	if !strings.HasPrefix(d.SPDXVersion, "SPDX-2.") {
		return nil, fmt.Errorf("decoding SBOM: spdxVersion %q is not SPDX 2", d.SPDXVersion)
	}
	return &d, nil
}

func layerDocument(ctx context.Context, m *v1.Manifest, config []byte, subject digest.Digest, blobs Blobs) (*Document, error) {
	l, err := lock.Parse(config)
	if err != nil {
		return nil, fmt.Errorf("%w: its config: %w", ErrInvalid, err)
	}
	tag, key, err := l.Tag()
	if err != nil {
		return nil, fmt.Errorf("%w: its config: %w", ErrInvalid, err)
	}
	if len(m.Layers) != len(l.Packages) {
		return nil, fmt.Errorf("%w: %d layer blobs for the %d wheels of its lock", ErrInvalid, len(m.Layers), len(l.Packages))
	}
	for i, ly := range m.Layers {
		p := l.Packages[i]
		if ly.Annotations[oci.AnnotationWheelSHA256] != p.SHA256 || oci.LayerWheel(ly) != p.Filename {
			return nil, fmt.Errorf("%w: layer blob %d is %s, its lock says %s", ErrInvalid, i, oci.LayerWheel(ly), p.Filename)
		}
	}
	if blobs == nil {
		return nil, errors.New("describing a layer: no blobs to read its wheels' METADATA from")
	}
	metas := make([][]byte, len(m.Layers))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readers)
	for i, ly := range m.Layers {
		g.Go(func() error {
			b, err := wheelMetadata(gctx, blobs, ly)
			if err != nil {
				return fmt.Errorf("%s: %w", l.Packages[i].Filename, err)
			}
			metas[i] = b
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("describing %s: %w", tag, err)
	}

	root := Package{
		SPDXID: ArtifactID, Name: tag, DownloadLocation: NoAssertion,
		Checksums:        []Checksum{{"SHA256", subject.Encoded()}},
		LicenseConcluded: NoAssertion, LicenseDeclared: NoAssertion, CopyrightText: NoAssertion,
		PrimaryPackagePurpose: "ARCHIVE",
		Comment: fmt.Sprintf("The pylayer %s layer whose OCI manifest has this checksum: one layer blob per wheel of its lock, key %s, for %s%s.",
			l.Kind, key, l.Target.String(), layerDetails(l)),
	}
	doc := &Document{Name: tag, Packages: []Package{root},
		Comment: fmt.Sprintf("The wheels of pylayer layer %s (lock key %s), read from the artifact itself: its lock and the METADATA in each layer blob.", tag, key)}
	refs := newLicenseRefs()
	ids := make(map[string]string, len(l.Packages)) // lock name -> SPDXID
	used := map[string]bool{ArtifactID: true}
	for i, p := range l.Packages {
		pkg, err := wheelPackage(p, metas[i], m.Layers[i], refs)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, p.Filename, err)
		}
		pkg.SPDXID = uniqueID("SPDXRef-Package-"+idPart(p.Name), used)
		ids[p.Name] = pkg.SPDXID
		doc.Packages = append(doc.Packages, pkg)
		doc.Relationships = append(doc.Relationships, Relationship{ArtifactID, "CONTAINS", pkg.SPDXID})
	}
	for _, p := range l.Packages {
		for _, by := range p.RequiredBy {
			if from, ok := ids[by]; ok {
				doc.Relationships = append(doc.Relationships, Relationship{from, "DEPENDS_ON", ids[p.Name]})
			}
		}
	}
	doc.ExtractedLicenses = refs.list()
	return doc, nil
}

func layerDetails(l *lock.Lock) string {
	var s string
	if l.Base != "" {
		s += ", stacked on base " + l.Base
	}
	if l.CompiledBy != "" {
		s += ", .pyc compiled by " + l.CompiledBy
	}
	return s
}

// wheelPackage describes one wheel of a lock from its METADATA (nil: the layer has none).
func wheelPackage(p lock.Package, meta []byte, layer v1.Descriptor, refs *licenseRefs) (Package, error) {
	pkg := Package{
		Name: p.Name, VersionInfo: p.Version, PackageFileName: p.Filename,
		DownloadLocation: NoAssertion,
		Checksums:        []Checksum{{"SHA256", p.SHA256}},
		LicenseConcluded: NoAssertion, CopyrightText: NoAssertion,
		ExternalRefs:          []ExternalRef{{"PACKAGE-MANAGER", "purl", Purl(p.Name, p.Version)}},
		PrimaryPackagePurpose: "LIBRARY",
		Comment:               "The checksum is the wheel's; it is installed in layer blob " + layer.Digest.String() + ".",
	}
	if meta == nil {
		pkg.LicenseDeclared, pkg.LicenseComments = NoAssertion, "The layer holds no METADATA of this wheel."
		return pkg, nil
	}
	md := parseMetadata(meta)
	if n := md.get("Name"); n != "" {
		if pep508.NormalizeName(n) != p.Name {
			return pkg, fmt.Errorf("its METADATA names %q, its lock %q", n, p.Name)
		}
		pkg.Name = n
	}
	dl := declaredLicense(md, p.Name+" "+p.Version, refs)
	pkg.LicenseDeclared, pkg.LicenseComments = dl.expr, dl.comment
	pkg.Summary = md.get("Summary")
	return pkg, nil
}

func interpreterDocument(m *v1.Manifest, config []byte, subject digest.Digest) (*Document, error) {
	cfg, err := interp.ParseConfig(config)
	if err != nil {
		return nil, fmt.Errorf("%w: its config: %w", ErrInvalid, err)
	}
	tag, err := interp.TagFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: its config: %w", ErrInvalid, err)
	}
	key := interp.KeyOf(config)
	tree := digest.Digest(cfg.Tree)
	blob := ""
	if len(m.Layers) == 1 {
		blob = ", packed in layer blob " + m.Layers[0].Digest.String()
	}
	root := Package{
		SPDXID: ArtifactID, Name: tag, DownloadLocation: NoAssertion,
		Checksums:        []Checksum{{"SHA256", subject.Encoded()}},
		LicenseConcluded: NoAssertion, LicenseDeclared: NoAssertion, CopyrightText: NoAssertion,
		PrimaryPackagePurpose: "ARCHIVE",
		Comment:               fmt.Sprintf("The pylayer interpreter artifact whose OCI manifest has this checksum: config key %s, mounted at %s.", key, cfg.MountPath),
	}
	python := Package{
		SPDXID: "SPDXRef-Package-cpython", Name: "cpython", VersionInfo: cfg.Version,
		DownloadLocation: NoAssertion,
		Checksums:        []Checksum{{"SHA256", tree.Encoded()}},
		LicenseConcluded: NoAssertion, LicenseDeclared: NoAssertion, CopyrightText: NoAssertion,
		LicenseComments:       "An interpreter artifact carries no license metadata.",
		ExternalRefs:          []ExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:generic/cpython@" + escapePurl(cfg.Version)}},
		PrimaryPackagePurpose: "APPLICATION",
		Comment: fmt.Sprintf("CPython %s (%s, %s); the checksum is of the prefix tree %s (its config's tree: the diff ID of its layer blob)%s.",
			cfg.Version, cfg.ABI, cfg.Platform, tree, blob),
	}
	if cfg.Source != interp.SourcePrefix {
		python.PackageFileName = cfg.Source
	}
	return &Document{Name: tag, Packages: []Package{root, python},
		Comment:       fmt.Sprintf("The pylayer interpreter artifact %s: CPython %s, tree %s, read from the artifact's config.", tag, cfg.Version, tree),
		Relationships: []Relationship{{ArtifactID, "CONTAINS", python.SPDXID}}}, nil
}

// Purl is the package URL of a PyPI package: pkg:pypi/NAME@VERSION, with the name as
// PEP 503 normalizes it and the version percent-encoded.
func Purl(name, version string) string {
	return "pkg:pypi/" + escapePurl(pep508.NormalizeName(name)) + "@" + escapePurl(version)
}

// escapePurl percent-encodes everything but unreserved characters, as purl's spec asks
// of names and versions ("+" of a local version becomes %2B).
func escapePurl(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// idPart makes s fit an SPDXID: letters, digits, "." and "-".
func idPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// uniqueID returns id, or id with a number appended when it is used already, and
// marks it used.
func uniqueID(id string, used map[string]bool) string {
	c := id
	for n := 2; used[c]; n++ {
		c = fmt.Sprintf("%s-%d", id, n)
	}
	used[c] = true
	return c
}
