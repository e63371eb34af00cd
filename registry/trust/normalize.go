package trust

import (
	"net/netip"
	"path/filepath"
	"strings"
)

// layoutPrefix starts the name of an OCI image layout directory ("oci:/abs/dir").
const layoutPrefix = "oci:"

// Normalize returns the form in which policies match a repository name and the host cache
// records it, so that two spellings of one repository are one repository:
//
//   - the registry host is case-folded, an IPv6 address is written canonically, and the
//     default port ":443" is dropped (pylayer speaks HTTPS to every registry it does not
//     reach over plain HTTP on loopback, and nothing serves plain HTTP on 443);
//   - the repository path is lowercased, the only case the distribution spec allows;
//   - an "oci:" layout path is cleaned ("oci:/srv//x/../y/" is "oci:/srv/y"); its case is
//     kept, as directories' names are case-sensitive.
//
// Normalize never fails: a name it cannot read is returned case-folded and otherwise as
// given, so it still matches only itself.
func Normalize(repo string) string {
	if dir, ok := strings.CutPrefix(repo, layoutPrefix); ok {
		if dir == "" {
			return layoutPrefix
		}
		return layoutPrefix + filepath.Clean(dir)
	}
	host, path, hasPath := strings.Cut(repo, "/")
	if h := normalizeHost(host); !strings.HasPrefix(h, layoutPrefix) {
		host = h // a host "OCI:5000" keeps its case: folded, it would read as a layout
	}
	if !hasPath {
		return host
	}
	return host + "/" + strings.ToLower(path)
}

// normalizeHost case-folds host[:port], writes an IPv6 address canonically and drops ":443".
func normalizeHost(hostport string) string {
	hostport = strings.ToLower(hostport)
	host, port := hostport, ""
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return hostport
		}
		host, port = hostport[1:end], strings.TrimPrefix(hostport[end+1:], ":")
		if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
			host = a.String()
		}
		host = "[" + host + "]"
	} else if h, p, ok := strings.Cut(hostport, ":"); ok {
		host, port = h, p
	}
	if port == "" || port == "443" {
		return host
	}
	return host + ":" + port
}

// SameRepository reports whether claimed, the repository a signature names (cosign's
// critical.identity.docker-reference, which may carry a tag or digest), is repo once both
// are normalized.
func SameRepository(claimed, repo string) bool {
	if claimed == "" {
		return false
	}
	return Normalize(stripReference(claimed)) == Normalize(repo)
}

// stripReference drops "@digest" and a ":tag" after the last '/' from a reference.
func stripReference(ref string) string {
	if name, _, ok := strings.Cut(ref, "@"); ok {
		ref = name
	}
	slash := strings.LastIndexByte(ref, '/')
	if colon := strings.LastIndexByte(ref, ':'); slash >= 0 && colon > slash {
		ref = ref[:colon]
	}
	return ref
}

// normalizeMatch is the normalized form of a rule's match: "*", a name, or a prefix
// ending in "/*".
func normalizeMatch(m string) string {
	if m == "*" {
		return m
	}
	prefix, ok := strings.CutSuffix(m, "/*")
	if !ok {
		return Normalize(m)
	}
	n := Normalize(prefix)
	if strings.HasSuffix(n, "/") { // "oci:/*"
		return n + "*"
	}
	return n + "/*"
}
