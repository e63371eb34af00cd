package sbom

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/interp"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// officeLike is a layer whose wheels declare their licenses each way core metadata can.
func officeLike(t testing.TB) (oci.Artifact, []byte) {
	return layerArtifact(t,
		testWheel{name: "openpyxl", version: "3.1.2", metadata: "Metadata-Version: 2.1\nName: openpyxl\nVersion: 3.1.2\nSummary: A Python library to read/write Excel 2010 xlsx/xlsm files\nLicense: MIT\nRequires-Dist: et-xmlfile\n\nLong description, License: GPL\n"},
		testWheel{name: "et-xmlfile", version: "1.1.0", requiredBy: []string{"openpyxl"}, metadata: "Metadata-Version: 2.1\nName: et_xmlfile\nVersion: 1.1.0\nLicense: MIT License\nClassifier: License :: OSI Approved :: MIT License\n"},
		testWheel{name: "pyyaml", version: "6.0.1", metadata: "Metadata-Version: 2.4\nName: PyYAML\nVersion: 6.0.1\nLicense-Expression: mit or (Apache-2.0 WITH LLVM-exception)\nLicense-File: LICENSE\n"},
		testWheel{name: "lxml", version: "5.2.1", metadata: "Metadata-Version: 2.1\r\nName: lxml\r\nVersion: 5.2.1\r\nLicense: BSD-3-Clause\r\n"},
		testWheel{name: "texty", version: "0.1", metadata: "Name: texty\nVersion: 0.1\nLicense: Copyright (c) Someone\n       |\n        Permission is hereby granted, free of charge.\nClassifier: License :: OSI Approved :: MIT License\n"},
		testWheel{name: "six", version: "1.16.0", metadata: "Metadata-Version: 2.1\nName: six\nVersion: 1.16.0\nLicense: UNKNOWN\nClassifier: Programming Language :: Python :: 3\nClassifier: License :: OSI Approved\nClassifier: License :: OSI Approved :: BSD License\nClassifier: License :: OSI Approved :: MIT License\n"},
		testWheel{name: "nolicense", version: "1.0", metadata: "Metadata-Version: 2.1\nName: nolicense\nVersion: 1.0\n"},
		testWheel{name: "nometa", version: "2.0"},
	)
}

func TestGenerateLayer(t *testing.T) {
	a, manifest := officeLike(t)
	b, d := generate(t, a, manifest)
	subject := digest.FromBytes(manifest)
	l, err := lock.Parse(a.Config)
	if err != nil {
		t.Fatal(err)
	}
	tag, key, _ := l.Tag()

	if d.SPDXVersion != "SPDX-2.3" || d.DataLicense != "CC0-1.0" || d.SPDXID != "SPDXRef-DOCUMENT" || d.Name != tag ||
		d.DocumentNamespace != "https://spdx.org/spdxdocs/pylayer-"+tag+"-"+subject.Encoded() {
		t.Errorf("document header %+v", d)
	}
	if d.CreationInfo.Created != "1970-01-01T00:00:00Z" || strings.Join(d.CreationInfo.Creators, ",") != "Tool: pylayer" {
		t.Errorf("creation info %+v, want the manifest's created time (the epoch) and pylayer", d.CreationInfo)
	}
	if !strings.Contains(d.Comment, key) {
		t.Errorf("document comment %q does not name the lock key %s", d.Comment, key)
	}
	root := d.Package(ArtifactID)
	if root == nil || root.Name != tag || root.Checksums[0].Value != subject.Encoded() || !strings.Contains(root.Comment, key) {
		t.Fatalf("artifact package %+v", root)
	}
	if !canonicalJSON(b) {
		t.Error("the document is not in canonical form (sorted keys, compact)")
	}

	want := map[string]struct{ name, license, comment string }{
		"openpyxl":   {"openpyxl", "MIT", "License field"},
		"et-xmlfile": {"et_xmlfile", "MIT", "license list's name of MIT"},
		"pyyaml":     {"PyYAML", "MIT OR (Apache-2.0 WITH LLVM-exception)", "License-Expression"},
		"lxml":       {"lxml", "BSD-3-Clause", "License field"},
		"six":        {"six", "LicenseRef-pylayer-License-OSI-Approved-BSD-License AND MIT", "classifiers"},
		"texty":      {"texty", "LicenseRef-pylayer-sha256-", "License field"},
		"nolicense":  {"nolicense", "NOASSERTION", "declares no license"},
		"nometa":     {"nometa", "NOASSERTION", "no METADATA"},
	}
	if len(d.Packages) != len(want)+1 {
		t.Fatalf("%d packages, want the artifact and %d wheels", len(d.Packages), len(want))
	}
	for i, p := range l.Packages {
		got := d.Packages[i+1]
		w := want[p.Name]
		if got.SPDXID != "SPDXRef-Package-"+p.Name || got.Name != w.name || got.VersionInfo != p.Version || got.PackageFileName != p.Filename {
			t.Errorf("%s: package %+v", p.Name, got)
		}
		if !strings.HasPrefix(got.LicenseDeclared, w.license) || !strings.Contains(got.LicenseComments, w.comment) || got.LicenseConcluded != NoAssertion {
			t.Errorf("%s: license %q (%s), want %q from the %s", p.Name, got.LicenseDeclared, got.LicenseComments, w.license, w.comment)
		}
		if len(got.Checksums) != 1 || got.Checksums[0] != (Checksum{"SHA256", p.SHA256}) || got.DownloadLocation != NoAssertion {
			t.Errorf("%s: checksums %v, download location %q", p.Name, got.Checksums, got.DownloadLocation)
		}
		if got.Purl() != "pkg:pypi/"+p.Name+"@"+p.Version {
			t.Errorf("%s: purl %q", p.Name, got.Purl())
		}
		if !strings.Contains(got.Comment, a.Layers[i].Desc.Digest.String()) {
			t.Errorf("%s: comment %q does not name its layer blob", p.Name, got.Comment)
		}
	}
	if s := d.Package("SPDXRef-Package-openpyxl").Summary; s != "A Python library to read/write Excel 2010 xlsx/xlsm files" {
		t.Errorf("summary %q", s)
	}

	// Every LicenseRef used is defined, with its text.
	defined := map[string]string{}
	for _, e := range d.ExtractedLicenses {
		defined[e.LicenseID] = e.ExtractedText
	}
	if defined["LicenseRef-pylayer-License-OSI-Approved-BSD-License"] != "License :: OSI Approved :: BSD License" ||
		defined[d.Package("SPDXRef-Package-texty").LicenseDeclared] != "Copyright (c) Someone\n\nPermission is hereby granted, free of charge." {
		t.Errorf("extracted licenses %v", d.ExtractedLicenses)
	}
	for _, p := range d.Packages {
		for _, tok := range strings.Fields(strings.NewReplacer("(", " ", ")", " ").Replace(p.LicenseDeclared)) {
			if strings.HasPrefix(tok, "LicenseRef-") && defined[tok] == "" {
				t.Errorf("%s uses %s, which the document does not define", p.Name, tok)
			}
		}
	}

	rels := map[Relationship]bool{}
	for _, r := range d.Relationships {
		rels[r] = true
	}
	for _, r := range []Relationship{
		{"SPDXRef-DOCUMENT", "DESCRIBES", ArtifactID},
		{ArtifactID, "CONTAINS", "SPDXRef-Package-six"},
		{"SPDXRef-Package-openpyxl", "DEPENDS_ON", "SPDXRef-Package-et-xmlfile"},
	} {
		if !rels[r] {
			t.Errorf("no relationship %+v in %+v", r, d.Relationships)
		}
	}
	if len(d.Relationships) != 1+len(want)+1 {
		t.Errorf("%d relationships, want DESCRIBES, %d CONTAINS and one DEPENDS_ON", len(d.Relationships), len(want))
	}
}

// TestGenerateDeterministic: the same artifact gives the same bytes, whether its blobs
// come from files or from a registry, and a golden digest pins the format.
func TestGenerateDeterministic(t *testing.T) {
	a, manifest := officeLike(t)
	first, _ := generate(t, a, manifest)
	again, err := Generate(context.Background(), manifest, a.Config, memBlobsOf(t, a))
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != string(again) {
		t.Fatalf("two documents of one artifact differ:\n%s\n%s", first, again)
	}
	b, m2 := officeLike(t) // built again, in other directories
	third, _ := generate(t, b, m2)
	if string(first) != string(third) {
		t.Fatalf("the same artifact built twice gives two documents:\n%s\n%s", first, third)
	}
	const golden = "sha256:be5f2faff87afea57388f1bb76f31bde90cab168669572e0f7c3f085c343fc4f"
	if got := digest.FromBytes(first); got != golden {
		t.Errorf("document digest %s, golden %s: the format changed; if on purpose, update the golden digest\n%s", got, golden, first)
	}
}

func TestGenerateInterpreter(t *testing.T) {
	for _, source := range []string{interp.SourcePrefix, "cpython-3.11.2-x86_64-unknown-linux-gnu-install_only.tar.gz"} {
		config := interpreterConfig(t, source)
		cfg, err := interp.ParseConfig(config)
		if err != nil {
			t.Fatal(err)
		}
		tag, _ := interp.TagFor(cfg)
		layer := v1.Descriptor{MediaType: oci.MediaTypeLayer, Digest: digest.FromString("prefix"), Size: 6}
		a := oci.Artifact{ArtifactType: oci.ArtifactTypePython, Config: config,
			Layers:      []oci.LayerBlob{{Desc: layer, Title: "cpython-3.11.2-manylinux_2_28_x86_64.tar.gz"}},
			Annotations: map[string]string{oci.AnnotationKind: interp.KindPython, oci.AnnotationKey: interp.KeyOf(config)}}
		manifest, _, err := a.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		b, err := Generate(context.Background(), manifest, config, nil)
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		d, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		py := d.Package("SPDXRef-Package-cpython")
		if d.Name != tag || py == nil || py.VersionInfo != "3.11.2" || py.Checksums[0].Value != strings.Repeat("ab", 32) ||
			!strings.Contains(py.Comment, cfg.Tree) || !strings.Contains(py.Comment, layer.Digest.String()) || py.Purl() != "pkg:generic/cpython@3.11.2" {
			t.Fatalf("interpreter document %s", b)
		}
		if (py.PackageFileName != "") != (source != interp.SourcePrefix) {
			t.Errorf("source %s: package file name %q", source, py.PackageFileName)
		}
		if root := d.Package(ArtifactID); root == nil || !strings.Contains(root.Comment, interp.KeyOf(config)) {
			t.Errorf("artifact package %+v does not name the config key", root)
		}
	}
}

func TestGenerateRejects(t *testing.T) {
	ctx := context.Background()
	a, manifest := layerArtifact(t, testWheel{name: "alpha", version: "1.0", metadata: "Name: alpha\nVersion: 1.0\n"})
	renamed, renamedManifest := layerArtifact(t, testWheel{name: "alpha", version: "1.0", metadata: "Name: beta\nVersion: 1.0\n"})
	var m v1.Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m *v1.Manifest)) []byte {
		c := m
		c.Layers = append([]v1.Descriptor(nil), m.Layers...)
		c.Annotations = map[string]string{}
		for k, v := range m.Annotations {
			c.Annotations[k] = v
		}
		f(&c)
		b, _ := json.Marshal(c)
		return b
	}
	lying := memBlobsOf(t, a)
	lying[a.Layers[0].Desc.Digest] = append(lying[a.Layers[0].Desc.Digest], 0) // one byte too many
	for _, c := range []struct {
		name     string
		manifest []byte
		config   []byte
		blobs    Blobs
		wantErr  error
	}{
		{"config not the manifest's", manifest, []byte(`{}`), ArtifactBlobs(a), ErrInvalid},
		{"two layers for one wheel", edit(func(m *v1.Manifest) { m.Layers = append(m.Layers, m.Layers[0]) }), a.Config, ArtifactBlobs(a), ErrInvalid},
		{"layer of another wheel", edit(func(m *v1.Manifest) { m.Layers[0].Annotations = map[string]string{v1.AnnotationTitle: "x.whl"} }), a.Config, ArtifactBlobs(a), ErrInvalid},
		{"not pylayer", edit(func(m *v1.Manifest) { m.ArtifactType = "application/x" }), a.Config, ArtifactBlobs(a), ErrInvalid},
		{"METADATA of another project", renamedManifest, renamed.Config, ArtifactBlobs(renamed), ErrInvalid},
		{"blob that does not match its digest", manifest, a.Config, lying, oci.ErrDigestMismatch},
		{"missing blob", manifest, a.Config, memBlobs{}, oci.ErrNotFound},
		{"no blobs", manifest, a.Config, nil, nil},
		{"not a manifest", []byte(`{"schemaVersion":1}`), a.Config, ArtifactBlobs(a), oci.ErrInvalidManifest},
	} {
		_, err := Generate(ctx, c.manifest, c.config, c.blobs)
		if err == nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
			t.Errorf("%s: Generate: %v, want %v", c.name, err, c.wantErr)
		}
	}
	// A layer whose manifest is not the artifact's own (same config, other annotations)
	// still describes its own digest.
	other := edit(func(m *v1.Manifest) { m.Annotations["org.example"] = "x" })
	b, err := Generate(ctx, other, a.Config, ArtifactBlobs(a))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), digest.FromBytes(other).Encoded()) {
		t.Fatal("the document does not name the manifest it describes")
	}
}

// TestCreated: the document's time is the manifest's, in SPDX's form, else the epoch.
func TestCreated(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "1970-01-01T00:00:00Z",
		"yesterday":                 "1970-01-01T00:00:00Z",
		oci.CreatedEpoch:            "1970-01-01T00:00:00Z",
		"2024-05-01T12:30:00+02:00": "2024-05-01T10:30:00Z",
		"2024-05-01T12:30:00.5Z":    "2024-05-01T12:30:00Z",
	} {
		if got := created(&v1.Manifest{Annotations: map[string]string{v1.AnnotationCreated: in}}); got != want {
			t.Errorf("created(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPurl(t *testing.T) {
	for _, c := range [][3]string{
		{"PyYAML", "6.0.1", "pkg:pypi/pyyaml@6.0.1"},
		{"zope.interface", "6.0", "pkg:pypi/zope-interface@6.0"},
		{"torch", "2.1.0+cpu", "pkg:pypi/torch@2.1.0%2Bcpu"},
		{"a_b", "1!2.0", "pkg:pypi/a-b@1%212.0"},
	} {
		if got := Purl(c[0], c[1]); got != c[2] {
			t.Errorf("Purl(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, b := range []string{``, `[]`, `{"spdxVersion":"SPDX-3.0"}`, `{}`} {
		if _, err := Parse([]byte(b)); err == nil {
			t.Errorf("Parse(%q) succeeded", b)
		}
	}
	if _, err := Parse(make([]byte, MaxBytes+1)); err == nil {
		t.Error("Parse of a document over the limit succeeded")
	}
}
