// Package trust is the trust policy: which public keys must have signed the artifacts of
// which repository before pylayer unpacks or runs anything from it.
//
// A policy is either one PEM public key file (trusted for every repository) or a JSON file:
//
//	{
//	  "repositories": [
//	    {"match": "registry.example:5000/team/pylayer", "keys": ["/etc/pylayer/ci.pub"]},
//	    {"match": "registry.example:5000/team/*",       "keys": ["/etc/pylayer/ci.pub", "/etc/pylayer/ops.pub"]},
//	    {"match": "registry.example/prod/*",            "keys": ["/etc/pylayer/prod.pub"], "require_docker_reference": true},
//	    {"match": "oci:/srv/scratch",                   "insecure_accept_unsigned": true}
//	  ]
//	}
//
// The most specific match wins (an exact name over a "/*" prefix, a longer prefix over a
// shorter one; "*" alone matches everything). Matches and repositories are compared in
// their Normalize form: host case-folded, ":443" dropped, paths lowercased, layout paths
// cleaned. Relative key paths, and relative "oci:" layout paths, are relative to the
// policy file. Accepting unsigned artifacts is a per-repository choice that must be spelled
// out, and callers announce it loudly on every use. A repository that no entry matches is
// refused: there is no implicit trust. With require_docker_reference, a signature counts
// only if the repository it names (cosign's critical.identity.docker-reference) is the one
// the artifact is used from.
//
// The policy is checked on every use, not only when an artifact is fetched: Permits
// decides, from how the host cache recorded that a digest was admitted (through which
// repository, unsigned or signed by which keys), whether the current policy still lets it
// be used under a repository. An unsigned exception thus stays in its repository, and a key
// removed from the policy stops working at once.
//
// It imports nothing of pylayer.
package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// ErrNoPolicy is wrapped when nothing says whom to trust for a repository.
var ErrNoPolicy = errors.New("no trust policy")

// Rule is one entry of a policy.
type Rule struct {
	Match                  string   `json:"match"`
	Keys                   []string `json:"keys,omitempty"`
	InsecureAcceptUnsigned bool     `json:"insecure_accept_unsigned,omitempty"`
	// RequireDockerReference: a signature counts only if the repository it claims
	// (critical.identity.docker-reference) is the repository the artifact is used from.
	RequireDockerReference bool `json:"require_docker_reference,omitempty"`
}

// Policy maps repositories to the keys that must have signed their artifacts.
type Policy struct {
	Repositories []Rule `json:"repositories"`
	source       string

	// keyIDs are the IDs of key files Permits has read, by the files' joined paths: a
	// policy is read anew for every use (Load), so one reading of its keys serves all the
	// artifacts decided on it (a sandbox's interpreter and layers) and no more.
	mu     sync.Mutex
	keyIDs map[string][]string
}

// Decision is what the policy says about one repository.
type Decision struct {
	Repository string   // normalized (see Normalize)
	Rule       Rule     // the rule that matched
	Keys       []string // absolute paths of PEM public key files; empty when unsigned is accepted
	Unsigned   bool     // verification is skipped, by explicit choice
}

// Load reads a policy from a PEM public key file or a JSON policy file.
func Load(path string) (*Policy, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("trust policy: %w", err)
	}
	if bytes.Contains(b, []byte("-----BEGIN ")) {
		return &Policy{Repositories: []Rule{{Match: "*", Keys: []string{abs}}}, source: abs}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("trust policy %s: want a PEM public key or a JSON policy: %w", path, err)
	}
	dir := filepath.Dir(abs)
	for i := range p.Repositories {
		r := &p.Repositories[i]
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("trust policy %s: repositories[%d]: %w", path, i, err)
		}
		for j, k := range r.Keys {
			if !filepath.IsAbs(k) {
				r.Keys[j] = filepath.Join(dir, k)
			}
		}
		if d, ok := strings.CutPrefix(r.Match, layoutPrefix); ok && d != "" && !filepath.IsAbs(d) {
			r.Match = layoutPrefix + filepath.Join(dir, d)
		}
	}
	p.source = abs
	return &p, nil
}

func (r Rule) validate() error {
	if strings.TrimSpace(r.Match) == "" {
		return errors.New(`"match" is empty`)
	}
	if strings.Contains(strings.TrimSuffix(r.Match, "*"), "*") {
		return fmt.Errorf("match %q: '*' is allowed only at the end", r.Match)
	}
	if strings.HasSuffix(r.Match, "*") && r.Match != "*" && !strings.HasSuffix(r.Match, "/*") {
		return fmt.Errorf("match %q: a prefix ends in \"/*\" (write %q), or \"*\" alone matches everything", r.Match, strings.TrimSuffix(r.Match, "*")+"/*")
	}
	if r.InsecureAcceptUnsigned && len(r.Keys) > 0 {
		return fmt.Errorf("match %q: give keys or insecure_accept_unsigned, not both", r.Match)
	}
	if !r.InsecureAcceptUnsigned && len(r.Keys) == 0 {
		return fmt.Errorf("match %q: no keys; list the public keys that sign its artifacts", r.Match)
	}
	if r.InsecureAcceptUnsigned && r.RequireDockerReference {
		return fmt.Errorf("match %q: require_docker_reference checks signatures, and insecure_accept_unsigned checks none: drop one", r.Match)
	}
	return nil
}

// AcceptsReference reports whether a signature claiming the repository claimed counts for
// d.Repository: always, unless the rule requires the claim to name it.
func (d Decision) AcceptsReference(claimed string) bool {
	return !d.Rule.RequireDockerReference || SameRepository(claimed, d.Repository)
}

// For decides for repository repo (e.g. "127.0.0.1:5000/team/pylayer" or "oci:/abs/dir"),
// matching rules and repo in their Normalize form.
func (p *Policy) For(repo string) (Decision, error) {
	if p == nil {
		return Decision{}, fmt.Errorf("%w for %s: pass --trust cosign.pub (or a policy file), or set PYLAYER_TRUST", ErrNoPolicy, repo)
	}
	type cand struct {
		r     Rule
		score int
	}
	norm := Normalize(repo)
	var cs []cand
	for _, r := range p.Repositories {
		m := normalizeMatch(r.Match)
		switch {
		case m == norm:
			cs = append(cs, cand{r, 1 << 20})
		case m == "*":
			cs = append(cs, cand{r, 0})
		case strings.HasSuffix(m, "/*") && strings.HasPrefix(norm, strings.TrimSuffix(m, "*")):
			cs = append(cs, cand{r, len(m)})
		}
	}
	if len(cs) == 0 {
		return Decision{}, fmt.Errorf("%w: the trust policy %s has no rule for %s: add one with the keys that sign it", ErrNoPolicy, p.source, repo)
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].score > cs[j].score })
	r := cs[0].r
	return Decision{Repository: norm, Rule: r, Keys: r.Keys, Unsigned: r.InsecureAcceptUnsigned}, nil
}
