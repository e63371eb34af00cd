package index

import (
	"mime"
	"strconv"
	"strings"
)

// offered lists the media types the server can produce, most preferred
// first; ties in the client's preference go to the earlier one.
var offered = []string{mediaJSON, mediaHTML, mediaTextHTML}

// formatAliases maps ?format= values to media types.
var formatAliases = map[string]string{
	"json":        mediaJSON,
	"html":        mediaTextHTML,
	mediaJSON:     mediaJSON,
	mediaHTML:     mediaHTML,
	mediaTextHTML: mediaTextHTML,
	"application/vnd.pypi.simple.latest+json": mediaJSON,
	"application/vnd.pypi.simple.latest+html": mediaHTML,
}

// negotiate picks the response media type for an Accept header (RFC 9110
// q-values; the most specific matching range decides a type's q). An empty
// header means text/html. It returns "" when nothing offered is acceptable.
func negotiate(accept string, allowJSON bool) string {
	if strings.TrimSpace(accept) == "" {
		return mediaTextHTML
	}
	type rng struct {
		typ, sub string
		q        float64
	}
	var ranges []rng
	for _, part := range strings.Split(accept, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		mt, params, err := mime.ParseMediaType(part)
		if err != nil {
			continue
		}
		mt = strings.ReplaceAll(mt, ".latest+", ".v1+")
		typ, sub, ok := strings.Cut(mt, "/")
		if !ok {
			continue
		}
		q := 1.0
		if qs, ok := params["q"]; ok {
			v, err := strconv.ParseFloat(qs, 64)
			if err != nil || v < 0 || v > 1 {
				continue
			}
			q = v
		}
		ranges = append(ranges, rng{typ, sub, q})
	}
	best, bestQ, bestSpec := "", 0.0, -1
	for _, o := range offered {
		if o == mediaJSON && !allowJSON {
			continue
		}
		ot, os, _ := strings.Cut(o, "/")
		q, spec := 0.0, -1
		for _, r := range ranges {
			s := -1
			switch {
			case r.typ == ot && r.sub == os:
				s = 2
			case r.typ == ot && r.sub == "*":
				s = 1
			case r.typ == "*" && r.sub == "*":
				s = 0
			}
			if s > spec {
				q, spec = r.q, s
			}
		}
		if q > bestQ || (q == bestQ && q > 0 && spec > bestSpec) {
			best, bestQ, bestSpec = o, q, spec
		}
	}
	return best
}
