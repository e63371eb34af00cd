package pep508

import "strings"

// checkURL applies packaging 21.3's URL test (urllib.parse.urlparse of
// CPython 3.11): file: URLs must survive urlunparse unchanged, anything
// else needs a scheme and a network location. It returns "" or what is
// wrong. It is stricter than CPython in refusing control characters and
// square brackets in the host, which urlparse strips or may reject.
func checkURL(u string) string {
	for _, r := range u {
		if r < 0x20 || r == 0x7f {
			return "the URL contains a control character"
		}
	}
	scheme, rest, ok := splitScheme(u)
	if !ok {
		return "the URL has no scheme (e.g. https://)"
	}
	netloc, path, hasNetloc := "", rest, strings.HasPrefix(rest, "//")
	if hasNetloc {
		end := strings.IndexAny(rest[2:], "/?#")
		if end < 0 {
			end = len(rest) - 2
		}
		netloc, path = rest[2:2+end], rest[2+end:]
	}
	if strings.ContainsAny(netloc, "[]") {
		return "IPv6 literal hosts are not supported in URLs"
	}
	if scheme != "file" {
		if netloc == "" {
			return "the URL has no host"
		}
		return ""
	}
	// file: round trip through urlunparse.
	if u[:len("file")] != "file" {
		return "invalid file URL (scheme must be lower case)"
	}
	frag, query := "", ""
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path, frag = path[:i], path[i+1:]
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path, query = path[:i], path[i+1:]
	}
	out := path
	if netloc != "" || !strings.HasPrefix(path, "//") {
		if path != "" && path[0] != '/' {
			path = "/" + path
		}
		out = "//" + netloc + path
	}
	out = "file:" + out
	if query != "" {
		out += "?" + query
	}
	if frag != "" {
		out += "#" + frag
	}
	if out != u {
		return "invalid file URL (use file:///absolute/path)"
	}
	return ""
}

// splitScheme is urlsplit's scheme rule: a letter, then letters, digits,
// "+", "-" or ".", then ":". The scheme is returned in lower case.
func splitScheme(u string) (scheme, rest string, ok bool) {
	i := strings.IndexByte(u, ':')
	if i <= 0 || !isLetter(u[0]) {
		return "", u, false
	}
	for j := 0; j < i; j++ {
		c := u[j]
		if !isAlnum(c) && c != '+' && c != '-' && c != '.' {
			return "", u, false
		}
	}
	return strings.ToLower(u[:i]), u[i+1:], true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
