// Package trust is the trust policy: which public keys must have signed the artifacts of
// which repository before pylayer unpacks or runs anything from it.
//
// A policy is either one PEM public key file (trusted for every repository) or a JSON file:
//
//	{
//	  "repositories": [
//	    {"match": "registry.example:5000/team/pylayer", "keys": ["/etc/pylayer/ci.pub"]},
//	    {"match": "registry.example:5000/team/*",       "keys": ["/etc/pylayer/ci.pub", "/etc/pylayer/ops.pub"]},
//	    {"match": "oci:/srv/scratch",                   "insecure_accept_unsigned": true}
//	  ]
//	}
//
// The most specific match wins (an exact name over a "/*" prefix, a longer prefix over a
// shorter one; "*" alone matches everything). Relative key paths are relative to the
// policy file. Accepting unsigned artifacts is a per-repository choice that must be spelled
// out, and callers announce it loudly on every use. A repository that no entry matches is
// refused: there is no implicit trust.
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
)

// ErrNoPolicy is wrapped when nothing says whom to trust for a repository.
var ErrNoPolicy = errors.New("no trust policy")

// Rule is one entry of a policy.
type Rule struct {
	Match                  string   `json:"match"`
	Keys                   []string `json:"keys,omitempty"`
	InsecureAcceptUnsigned bool     `json:"insecure_accept_unsigned,omitempty"`
}

// Policy maps repositories to the keys that must have signed their artifacts.
type Policy struct {
	Repositories []Rule `json:"repositories"`
	source       string
}

// Decision is what the policy says about one repository.
type Decision struct {
	Repository string
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
	if r.InsecureAcceptUnsigned && len(r.Keys) > 0 {
		return fmt.Errorf("match %q: give keys or insecure_accept_unsigned, not both", r.Match)
	}
	if !r.InsecureAcceptUnsigned && len(r.Keys) == 0 {
		return fmt.Errorf("match %q: no keys; list the public keys that sign its artifacts", r.Match)
	}
	return nil
}

// For decides for repository repo (e.g. "127.0.0.1:5000/team/pylayer" or "oci:/abs/dir").
func (p *Policy) For(repo string) (Decision, error) {
	if p == nil {
		return Decision{}, fmt.Errorf("%w for %s: pass --trust cosign.pub (or a policy file), or set PYLAYER_TRUST", ErrNoPolicy, repo)
	}
	type cand struct {
		r     Rule
		score int
	}
	var cs []cand
	for _, r := range p.Repositories {
		switch {
		case r.Match == repo:
			cs = append(cs, cand{r, 1 << 20})
		case r.Match == "*":
			cs = append(cs, cand{r, 0})
		case strings.HasSuffix(r.Match, "/*") && strings.HasPrefix(repo, strings.TrimSuffix(r.Match, "*")):
			cs = append(cs, cand{r, len(r.Match)})
		}
	}
	if len(cs) == 0 {
		return Decision{}, fmt.Errorf("%w: the trust policy %s has no rule for %s: add one with the keys that sign it", ErrNoPolicy, p.source, repo)
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].score > cs[j].score })
	r := cs[0].r
	return Decision{Repository: repo, Rule: r, Keys: r.Keys, Unsigned: r.InsecureAcceptUnsigned}, nil
}
