package index

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
)

// File is one distribution file listed on a project page.
type File struct {
	Project        string // normalized project name (PEP 503)
	Filename       string
	URL            string // absolute, without credentials and without the #fragment
	SHA256         string // lowercase hex, "" if the index gives none
	Size           int64  // 0 if unknown
	RequiresPython string // "" if none (HTML-unescaped)
	Yanked         bool
	YankedReason   string
	HasMetadata    bool // PEP 658/714 metadata file available
	MetadataSHA256 string
}

// link is a file entry before it is checked and resolved.
type link struct {
	href           string
	sha256         string
	size           int64
	requiresPython string
	yanked         bool
	yankedReason   string
	hasMetadata    bool
	metadataSHA256 string
}

// parseHTML reads a PEP 503 project page. Relative hrefs resolve against the
// first <base href>, else pageURL. A bare data-yanked attribute counts as
// yanked (PEP 592; pip 23.2.1 ignores it).
func parseHTML(pageURL *url.URL, project string, body []byte) []File {
	p := scanHTML(body)
	base := pageURL
	if p.hasBase {
		if b, err := pageURL.Parse(strings.TrimSpace(p.baseHref)); err == nil {
			base = b
		}
	}
	var links []link
	for _, a := range p.anchors {
		href := a["href"]
		if !href.hasValue || href.value == "" {
			continue
		}
		l := link{href: href.value}
		if rp := a["data-requires-python"]; rp.hasValue {
			l.requiresPython = rp.value
		}
		if y, ok := a["data-yanked"]; ok {
			l.yanked, l.yankedReason = true, y.value
		}
		md, ok := a["data-core-metadata"]
		if !ok || !md.hasValue {
			md, ok = a["data-dist-info-metadata"]
		}
		if ok && md.hasValue {
			l.hasMetadata = true
			if name, val, found := strings.Cut(md.value, "="); found && name == "sha256" {
				l.metadataSHA256 = strings.ToLower(val)
			}
		}
		links = append(links, l)
	}
	return resolveLinks(base, project, links)
}

type jsonPage struct {
	Meta struct {
		APIVersion string `json:"api-version"`
	} `json:"meta"`
	Files []jsonFile `json:"files"`
}

type jsonFile struct {
	URL              *string           `json:"url"`
	Hashes           map[string]string `json:"hashes"`
	RequiresPython   *string           `json:"requires-python"`
	Size             *int64            `json:"size"`
	Yanked           json.RawMessage   `json:"yanked"`
	CoreMetadata     json.RawMessage   `json:"core-metadata"`
	DistInfoMetadata json.RawMessage   `json:"dist-info-metadata"`
}

// parseJSON reads a PEP 691 project page. "yanked" may be a bool or a
// reason string; any string, even "", counts as yanked (pip ignores "").
func parseJSON(pageURL *url.URL, project string, body []byte) ([]File, error) {
	var page jsonPage
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("decoding JSON: %w", err)
	}
	if v := page.Meta.APIVersion; v != "" {
		if major, _, _ := strings.Cut(v, "."); major != "1" {
			return nil, fmt.Errorf("unsupported simple API version %q (want 1.x)", v)
		}
	}
	links := make([]link, 0, len(page.Files))
	for i, f := range page.Files {
		if f.URL == nil || *f.URL == "" {
			continue
		}
		l := link{href: *f.URL, sha256: strings.ToLower(f.Hashes["sha256"])}
		if f.RequiresPython != nil {
			l.requiresPython = *f.RequiresPython
		}
		if f.Size != nil {
			if *f.Size < 0 {
				return nil, fmt.Errorf("files[%d]: negative size %d", i, *f.Size)
			}
			l.size = *f.Size
		}
		var err error
		if l.yanked, l.yankedReason, err = jsonYanked(f.Yanked); err != nil {
			return nil, fmt.Errorf("files[%d].yanked: %w", i, err)
		}
		md := f.CoreMetadata
		if isJSONNull(md) {
			md = f.DistInfoMetadata
		}
		if l.hasMetadata, l.metadataSHA256, err = jsonMetadata(md); err != nil {
			return nil, fmt.Errorf("files[%d].core-metadata: %w", i, err)
		}
		links = append(links, l)
	}
	return resolveLinks(pageURL, project, links), nil
}

func isJSONNull(m json.RawMessage) bool {
	return len(m) == 0 || bytes.Equal(bytes.TrimSpace(m), []byte("null"))
}

func jsonYanked(m json.RawMessage) (bool, string, error) {
	if isJSONNull(m) {
		return false, "", nil
	}
	var b bool
	if err := json.Unmarshal(m, &b); err == nil {
		return b, "", nil
	}
	var s string
	if err := json.Unmarshal(m, &s); err == nil {
		return true, s, nil
	}
	return false, "", errors.New("want a bool or a string")
}

func jsonMetadata(m json.RawMessage) (bool, string, error) {
	if isJSONNull(m) {
		return false, "", nil
	}
	var b bool
	if err := json.Unmarshal(m, &b); err == nil {
		return b, "", nil
	}
	var h map[string]string
	if err := json.Unmarshal(m, &h); err == nil {
		return true, strings.ToLower(h["sha256"]), nil
	}
	return false, "", errors.New("want a bool or an object of hashes")
}

// resolveLinks turns links into Files: URLs resolved against base, only
// http(s), credentials and fragment removed (a "sha256=" fragment overrides
// other hashes, as in pip), file names that are safe path elements and that
// belong to project. Others are dropped.
func resolveLinks(base *url.URL, project string, links []link) []File {
	files := make([]File, 0, len(links))
	for _, l := range links {
		u, err := base.Parse(strings.TrimSpace(l.href))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			continue
		}
		for _, kv := range strings.Split(u.EscapedFragment(), "&") {
			if v, ok := strings.CutPrefix(kv, "sha256="); ok {
				l.sha256 = strings.ToLower(v)
				break
			}
		}
		u.User, u.Fragment, u.RawFragment = nil, "", ""
		fn := path.Base(strings.TrimRight(u.Path, "/"))
		if !safeFilename(fn) || !belongsTo(fn, project) {
			continue
		}
		files = append(files, File{
			Project:        project,
			Filename:       fn,
			URL:            u.String(),
			SHA256:         l.sha256,
			Size:           l.size,
			RequiresPython: l.requiresPython,
			Yanked:         l.yanked,
			YankedReason:   l.yankedReason,
			HasMetadata:    l.hasMetadata,
			MetadataSHA256: l.metadataSHA256,
		})
	}
	return files
}

// belongsTo reports whether a file name is a distribution of project: a
// wheel whose name component normalizes to project, or another file whose
// normalized name starts with "project-" (as pip judges sdists).
func belongsTo(fn, project string) bool {
	if strings.HasSuffix(fn, ".whl") {
		p, _, _, ok := parseDistFilename(fn)
		return ok && p == project
	}
	return strings.HasPrefix(Normalize(fn), project+"-")
}
