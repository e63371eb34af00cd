package trust

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNotAdmitted is wrapped when the current policy does not let an artifact that the host
// cache holds be used from a repository.
var ErrNotAdmitted = errors.New("not admitted for this repository by the current trust policy")

// Signer is a trusted key that signed an artifact, and the repository its signature claims.
type Signer struct {
	KeyID           string // "sha256:<hex>" of the public key's PKIX DER encoding
	DockerReference string // critical.identity.docker-reference of the signed payload
}

// Admission is how an artifact entered the host cache: through which repository, by which
// rule, unsigned by that rule's explicit choice or signed by which trusted keys.
type Admission struct {
	Repository string // normalized (see Normalize)
	Rule       string // the match of the rule that admitted it, for messages
	Unsigned   bool
	Signers    []Signer // when not Unsigned: at least one
}

// KeyIDs returns the IDs ("sha256:<hex>", as Signer.KeyID) of the public keys in the given
// files. It is the caller's cryptography, so that this package needs none.
type KeyIDs func(keyFiles []string) ([]string, error)

// Permits returns the index in admitted of an admission under which the current policy lets
// an artifact be used from repo, or an error wrapping ErrNotAdmitted (or ErrNoPolicy) that says why none does and what
// to do. It needs no network: ids reads the policy's key files. An admission counts when:
//
//   - it came through repo itself (in Normalize form) and the rule for repo still accepts
//     it: unsigned only while that rule accepts unsigned artifacts; signed while the rule
//     accepts unsigned artifacts or still lists a key that signed it;
//   - it came through another repository S, signed by a key that the current rule for S
//     still lists and that the rule for repo lists too (or repo accepts unsigned
//     artifacts). An unsigned admission never counts for another repository.
//
// A rule with require_docker_reference counts only signatures that name its repository.
func (p *Policy) Permits(repo string, admitted []Admission, ids KeyIDs) (int, error) {
	dec, err := p.For(repo)
	if err != nil {
		return -1, err
	}
	if len(admitted) == 0 {
		return -1, fmt.Errorf("%w: the host cache has no record of who admitted it (an older pylayer installed it, or the record was lost): pull it again from %s", ErrNotAdmitted, dec.Repository)
	}
	keysOf := func(d Decision) ([]string, error) {
		k := strings.Join(d.Keys, "\x00")
		p.mu.Lock()
		got, ok := p.keyIDs[k]
		p.mu.Unlock()
		if ok {
			return got, nil
		}
		got, err := ids(d.Keys)
		if err != nil {
			return nil, fmt.Errorf("the keys of the trust rule %q: %w", d.Rule.Match, err)
		}
		p.mu.Lock()
		if p.keyIDs == nil {
			p.keyIDs = map[string][]string{}
		}
		p.keyIDs[k] = got
		p.mu.Unlock()
		return got, nil
	}
	var why []string
	for i, a := range admitted {
		reason, err := p.permits(dec, a, keysOf)
		if err != nil {
			return -1, err
		}
		if reason == "" {
			return i, nil
		}
		why = append(why, reason)
	}
	slices.Sort(why)
	return -1, fmt.Errorf("%w: %s", ErrNotAdmitted, strings.Join(slices.Compact(why), "; "))
}

// permits says why admission a does not count for dec's repository ("" when it does).
func (p *Policy) permits(dec Decision, a Admission, keysOf func(Decision) ([]string, error)) (string, error) {
	repo, via := dec.Repository, Normalize(a.Repository)
	again := "pull it again from " + repo + " with a key the policy trusts"
	same := via == repo
	if a.Unsigned {
		switch {
		case !same:
			return fmt.Sprintf("it entered the host cache unsigned through %s (rule %q), and an unsigned exception stays in its repository: %s", via, a.Rule, again), nil
		case !dec.Unsigned:
			return fmt.Sprintf("it entered the host cache unsigned through %s (rule %q), and the rule %q for %s now requires a signature: %s", via, a.Rule, dec.Rule.Match, repo, again), nil
		}
		return "", nil
	}
	if len(a.Signers) == 0 {
		return fmt.Sprintf("its admission through %s names no signer: %s", via, again), nil
	}
	// Signers the source repository's current rule still trusts.
	vouched := a.Signers
	if !same {
		src, err := p.For(via)
		if err != nil {
			return fmt.Sprintf("it was admitted through %s, for which the policy has no rule any more: %s", via, again), nil
		}
		if src.Unsigned {
			return fmt.Sprintf("it was admitted through %s, whose rule %q now checks no signature, so it vouches for nothing elsewhere: %s", via, src.Rule.Match, again), nil
		}
		keys, err := keysOf(src)
		if err != nil {
			return "", err
		}
		vouched = nil
		for _, s := range a.Signers {
			if slices.Contains(keys, s.KeyID) && src.AcceptsReference(s.DockerReference) {
				vouched = append(vouched, s)
			}
		}
		if len(vouched) == 0 {
			return fmt.Sprintf("the key that admitted it through %s (%s) was removed from the policy for %s: %s", via, signerIDs(a.Signers), via, again), nil
		}
	}
	if dec.Unsigned {
		return "", nil
	}
	keys, err := keysOf(dec)
	if err != nil {
		return "", err
	}
	var trusted []Signer
	for _, s := range vouched {
		if slices.Contains(keys, s.KeyID) {
			if dec.AcceptsReference(s.DockerReference) {
				return "", nil
			}
			trusted = append(trusted, s)
		}
	}
	switch {
	case len(trusted) > 0:
		return fmt.Sprintf("its signature names the repository %q, and the rule %q for %s requires one that names %s: pull it again from %s, signed for %s", trusted[0].DockerReference, dec.Rule.Match, repo, repo, repo, repo), nil
	case same:
		return fmt.Sprintf("the key that admitted it (%s) was removed from the policy for %s (rule %q): %s", signerIDs(a.Signers), repo, dec.Rule.Match, again), nil
	}
	return fmt.Sprintf("it was admitted through %s signed by %s, a key the policy does not trust for %s (rule %q): %s", via, signerIDs(vouched), repo, dec.Rule.Match, again), nil
}

func signerIDs(ss []Signer) string {
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = s.KeyID
	}
	return strings.Join(ids, ", ")
}
