package sbom

// The SPDX 2.3 JSON document, as far as Generate writes it
// (https://spdx.github.io/spdx-spec/v2.3/). Generate's bytes have these fields with their
// object keys sorted; Parse reads them back.

// SPDX constants Generate writes.
const (
	SPDXVersion = "SPDX-2.3"
	DataLicense = "CC0-1.0"
	DocumentID  = "SPDXRef-DOCUMENT"
	// ArtifactID is the SPDXID of the package that stands for the OCI artifact itself.
	ArtifactID = "SPDXRef-Artifact"
	// Creator is the document's one creator. It carries no version, so that the same
	// artifact gives the same document whichever pylayer writes it.
	Creator = "Tool: pylayer"
)

// Document is an SPDX 2.3 document.
type Document struct {
	SPDXID            string             `json:"SPDXID"`
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	Comment           string             `json:"comment,omitempty"`
	CreationInfo      CreationInfo       `json:"creationInfo"`
	Packages          []Package          `json:"packages"`
	Relationships     []Relationship     `json:"relationships"`
	ExtractedLicenses []ExtractedLicense `json:"hasExtractedLicensingInfos,omitempty"`
}

// CreationInfo says when and by what the document was made.
type CreationInfo struct {
	Created  string   `json:"created"` // UTC, "2006-01-02T15:04:05Z"
	Creators []string `json:"creators"`
}

// Package is one SPDX package: the artifact, a wheel, or an interpreter.
type Package struct {
	SPDXID                string        `json:"SPDXID"`
	Name                  string        `json:"name"`
	VersionInfo           string        `json:"versionInfo,omitempty"`
	PackageFileName       string        `json:"packageFileName,omitempty"`
	DownloadLocation      string        `json:"downloadLocation"`
	FilesAnalyzed         bool          `json:"filesAnalyzed"`
	Checksums             []Checksum    `json:"checksums,omitempty"`
	LicenseConcluded      string        `json:"licenseConcluded"`
	LicenseDeclared       string        `json:"licenseDeclared"`
	LicenseComments       string        `json:"licenseComments,omitempty"`
	CopyrightText         string        `json:"copyrightText"`
	Summary               string        `json:"summary,omitempty"`
	Comment               string        `json:"comment,omitempty"`
	ExternalRefs          []ExternalRef `json:"externalRefs,omitempty"`
	PrimaryPackagePurpose string        `json:"primaryPackagePurpose,omitempty"`
}

// Checksum is a package checksum; Generate writes SHA256 ones.
type Checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"` // lowercase hex
}

// ExternalRef is a package's external reference: Generate writes purls.
type ExternalRef struct {
	Category string `json:"referenceCategory"` // "PACKAGE-MANAGER"
	Type     string `json:"referenceType"`     // "purl"
	Locator  string `json:"referenceLocator"`  // "pkg:pypi/NAME@VERSION"
}

// Relationship relates two SPDX elements: DESCRIBES, CONTAINS, DEPENDS_ON.
type Relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// ExtractedLicense defines a LicenseRef a license expression of the document uses.
type ExtractedLicense struct {
	LicenseID     string `json:"licenseId"`
	ExtractedText string `json:"extractedText"`
	Comment       string `json:"comment,omitempty"`
}

// Package returns the package of the document with SPDXID id, or nil.
func (d *Document) Package(id string) *Package {
	for i := range d.Packages {
		if d.Packages[i].SPDXID == id {
			return &d.Packages[i]
		}
	}
	return nil
}

// Purl is the package's purl, "" if it has none.
func (p *Package) Purl() string {
	for _, r := range p.ExternalRefs {
		if r.Type == "purl" {
			return r.Locator
		}
	}
	return ""
}
