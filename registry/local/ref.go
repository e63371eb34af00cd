package local

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
)

// ErrInvalidRef: a reference cannot be parsed.
var ErrInvalidRef = errors.New("invalid reference")

// LayoutPrefix starts a reference to an OCI image layout directory.
const LayoutPrefix = "oci:"

// maxRepoName is distribution's limit on a repository name, host included.
const maxRepoName = 255

// Ref names a repository and, optionally, a tag and/or a manifest digest in it. Exactly one
// of Repo and Layout is set. When both Tag and Digest are set, Digest decides what is read
// and Tag is kept for display.
type Ref struct {
	Repo   string        // "HOST[:PORT]/path/repo" of a registry repository
	Layout string        // absolute directory of an OCI image layout
	Tag    string        // "" when absent
	Digest digest.Digest // "" when absent; always sha256
}

// Name is the repository for humans and signatures: "HOST/path" or "oci:/abs/dir".
func (r Ref) Name() string {
	if r.Layout != "" {
		return LayoutPrefix + r.Layout
	}
	return r.Repo
}

// String is the reference in the syntax ParseRef reads.
func (r Ref) String() string {
	s := r.Name()
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + string(r.Digest)
	}
	return s
}

// Host is the registry host[:port] of a registry reference ("" for a layout).
func (r Ref) Host() string {
	host, _, _ := strings.Cut(r.Repo, "/")
	return host
}

// Path is the repository path without the host ("team/pylayer"; "" for a layout).
func (r Ref) Path() string {
	_, p, _ := strings.Cut(r.Repo, "/")
	return p
}

// ParseRef parses "oci:DIR[:TAG][@sha256:HEX]" (DIR is made absolute) or
// "HOST[:PORT]/path/repo[:TAG][@sha256:HEX]". The host must be explicit: a first component
// without a dot or port that is not "localhost" is refused, as nothing like Docker Hub is
// implied. Errors wrap ErrInvalidRef and say what is wrong.
func ParseRef(s string) (Ref, error) {
	bad := func(format string, args ...any) (Ref, error) {
		return Ref{}, fmt.Errorf("%w %q: %s", ErrInvalidRef, s, fmt.Sprintf(format, args...))
	}
	if s == "" {
		return bad("empty reference")
	}
	if strings.ContainsAny(s, "\x00\n\r\t ") {
		return bad("references cannot contain whitespace or NUL")
	}
	if i := strings.Index(s, "://"); i >= 0 && !strings.HasPrefix(s, LayoutPrefix) {
		return bad("drop the %q: a reference is HOST[:PORT]/path/repo[:TAG][@DIGEST] (plain HTTP is chosen with --insecure-registry, not a URL scheme)", s[:i+3])
	}
	rest, isLayout := strings.CutPrefix(s, LayoutPrefix)

	var ref Ref
	if name, dgst, ok := strings.Cut(rest, "@"); ok {
		d, err := ParseDigest(dgst)
		if err != nil {
			return bad("%v", err)
		}
		ref.Digest, rest = d, name
	}
	// A tag follows the last ':' that comes after the last '/'.
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		if err := oci.ValidTag(rest[i+1:]); err != nil {
			return bad("%v", err)
		}
		ref.Tag, rest = rest[i+1:], rest[:i]
	}

	if isLayout {
		if rest == "" {
			return bad("missing directory: write oci:DIR[:TAG]")
		}
		abs, err := filepath.Abs(rest)
		if err != nil {
			return bad("directory: %v", err)
		}
		if strings.Contains(filepath.Base(abs), ":") {
			// "oci:/x/a:b/" would print as "oci:/x/a:b", which reads as tag b of /x/a.
			return bad("the directory name %q contains ':', which reads as a tag; rename it", filepath.Base(abs))
		}
		ref.Layout = abs
		return ref, nil
	}

	host, path, ok := strings.Cut(rest, "/")
	if !ok || path == "" {
		return bad("missing repository path: write HOST[:PORT]/path/repo, e.g. registry.example.com/team/pylayer")
	}
	if err := CheckHost(host); err != nil {
		return bad("%v", err)
	}
	if err := CheckRepoPath(path); err != nil {
		return bad("%v", err)
	}
	if len(rest) > maxRepoName {
		return bad("repository name is %d characters, the limit is %d", len(rest), maxRepoName)
	}
	ref.Repo = rest
	return ref, nil
}

// ParseDigest parses a manifest or blob digest as a reference carries it: sha256 only.
func ParseDigest(s string) (digest.Digest, error) {
	d := digest.Digest(s)
	if err := d.Validate(); err != nil {
		return "", fmt.Errorf("digest %q: %v (want sha256:<64 lowercase hex digits>)", s, err)
	}
	if d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("digest %q: only sha256 digests are supported", s)
	}
	return d, nil
}

// CheckHost accepts "name", "name:port", "IPv4[:port]" and "[IPv6][:port]", where a bare
// name must contain a dot or be "localhost" (so "team/pylayer" is not taken for a host).
func CheckHost(hostport string) error {
	host, port := hostport, ""
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return fmt.Errorf("registry host %q: missing ']'", hostport)
		}
		host, port = hostport[1:end], hostport[end+1:]
		if ip := net.ParseIP(host); ip == nil || ip.To4() != nil {
			return fmt.Errorf("registry host %q: %q is not an IPv6 address", hostport, host)
		}
		if port != "" && !strings.HasPrefix(port, ":") {
			return fmt.Errorf("registry host %q: unexpected %q after ']'", hostport, port)
		}
		port = strings.TrimPrefix(port, ":")
		if port == "" && strings.HasSuffix(hostport, ":") {
			return fmt.Errorf("registry host %q: empty port", hostport)
		}
	} else if h, p, ok := strings.Cut(hostport, ":"); ok {
		host, port = h, p
		if port == "" {
			return fmt.Errorf("registry host %q: empty port", hostport)
		}
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' || port[0] == '+' {
			return fmt.Errorf("registry host %q: port %q is not a number from 1 to 65535", hostport, port)
		}
	}
	if strings.HasPrefix(hostport, "[") {
		return nil
	}
	if host == "" {
		return fmt.Errorf("empty registry host")
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("registry host %q: %q is not a valid host name", hostport, host)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("registry host %q: %q is not a valid host name", hostport, host)
			}
		}
	}
	if port == "" && !strings.Contains(host, ".") && host != "localhost" {
		return fmt.Errorf("%q is not a registry host (it has no dot or port and is not localhost): name the registry explicitly, e.g. registry.example.com/%s/...", host, host)
	}
	return nil
}

// CheckRepoPath applies distribution's grammar: components of [a-z0-9] runs separated by
// ".", "_", "__" or runs of "-", joined by "/".
func CheckRepoPath(p string) error {
	for _, comp := range strings.Split(p, "/") {
		if comp == "" {
			return fmt.Errorf("repository path %q has an empty component", p)
		}
		if !validComponent(comp) {
			return fmt.Errorf("repository path component %q must be lowercase letters and digits, separated by '.', '_', '__' or '-'", comp)
		}
	}
	return nil
}

func validComponent(c string) bool {
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }
	if !alnum(c[0]) || !alnum(c[len(c)-1]) {
		return false
	}
	for i := 1; i < len(c); {
		if alnum(c[i]) {
			i++
			continue
		}
		// A separator run: ".", "_", "__", or one or more "-".
		j := i
		switch c[i] {
		case '.':
			j++
		case '_':
			j++
			if c[j] == '_' {
				j++
			}
		case '-':
			for c[j] == '-' {
				j++
			}
		default:
			return false
		}
		if !alnum(c[j]) { // c ends in an alnum, so j is in range
			return false
		}
		i = j
	}
	return true
}
