package index

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"os"
	"sort"
	"time"
)

var timeZero time.Time

func openRoot(dir string) (*os.Root, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening index directory: %w", err)
	}
	return root, nil
}

type jsonMeta struct {
	APIVersion string `json:"api-version"`
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only plain structs, maps and strings are encoded
	}
	return buf.Bytes()
}

func renderRoot(mt string, projects []string) []byte {
	if mt == mediaJSON {
		type proj struct {
			Name string `json:"name"`
		}
		ps := make([]proj, len(projects))
		for i, p := range projects {
			ps[i] = proj{p}
		}
		return marshal(struct {
			Meta     jsonMeta `json:"meta"`
			Projects []proj   `json:"projects"`
		}{jsonMeta{"1.1"}, ps})
	}
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html>\n<head>\n<meta name=\"pypi:repository-version\" content=\"1.1\">\n<title>Simple index</title>\n</head>\n<body>\n")
	for _, p := range projects {
		fmt.Fprintf(&b, "<a href=\"%s/\">%s</a><br>\n", html.EscapeString(url.PathEscape(p)), html.EscapeString(p))
	}
	b.WriteString("</body>\n</html>\n")
	return b.Bytes()
}

// fileHref is relative to /simple/<project>/ so the index works under any
// mount point.
func fileHref(name string) string { return "../../files/" + url.PathEscape(name) }

// renderProject writes a project page; metaFiles says whether files with a
// readable METADATA announce their PEP 658 metadata file.
func renderProject(mt, project string, files []listing, metaFiles bool) []byte {
	if mt == mediaJSON {
		type jf struct {
			Filename       string            `json:"filename"`
			URL            string            `json:"url"`
			Hashes         map[string]string `json:"hashes"`
			RequiresPython string            `json:"requires-python,omitempty"`
			Size           int64             `json:"size"`
			Yanked         any               `json:"yanked"`
			CoreMetadata   any               `json:"core-metadata"`
			// No "dist-info-metadata" key: pip 23.0 (Debian bookworm's) crashes on its dict
			// form, which is why PEP 714 renamed it; clients that know only the old key fall
			// back to reading METADATA from the wheel.
		}
		out := make([]jf, 0, len(files))
		seen := map[string]bool{}
		var versions []string
		for _, f := range files {
			e := jf{Filename: f.name, URL: fileHref(f.name), Hashes: map[string]string{"sha256": f.sha256},
				RequiresPython: f.reqPy, Size: f.size, Yanked: false, CoreMetadata: false}
			if f.yanked {
				e.Yanked = true
				if f.reason != "" {
					e.Yanked = f.reason
				}
			}
			if metaFiles && f.metaSum != "" {
				e.CoreMetadata = map[string]string{"sha256": f.metaSum}
			}
			out = append(out, e)
			if !seen[f.version] {
				seen[f.version] = true
				versions = append(versions, f.version)
			}
		}
		sort.Strings(versions)
		if versions == nil {
			versions = []string{}
		}
		return marshal(struct {
			Meta     jsonMeta `json:"meta"`
			Name     string   `json:"name"`
			Files    []jf     `json:"files"`
			Versions []string `json:"versions"`
		}{jsonMeta{"1.1"}, project, out, versions})
	}
	var b bytes.Buffer
	esc := html.EscapeString
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html>\n<head>\n<meta name=\"pypi:repository-version\" content=\"1.1\">\n<title>Links for %s</title>\n</head>\n<body>\n<h1>Links for %s</h1>\n", esc(project), esc(project))
	for _, f := range files {
		fmt.Fprintf(&b, "<a href=\"%s#sha256=%s\"", esc(fileHref(f.name)), f.sha256)
		if f.reqPy != "" {
			fmt.Fprintf(&b, " data-requires-python=\"%s\"", esc(f.reqPy))
		}
		if metaFiles && f.metaSum != "" {
			fmt.Fprintf(&b, " data-dist-info-metadata=\"sha256=%s\" data-core-metadata=\"sha256=%s\"", f.metaSum, f.metaSum)
		}
		if f.yanked {
			fmt.Fprintf(&b, " data-yanked=\"%s\"", esc(f.reason))
		}
		fmt.Fprintf(&b, ">%s</a><br>\n", esc(f.name))
	}
	b.WriteString("</body>\n</html>\n")
	return b.Bytes()
}
