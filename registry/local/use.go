package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/interp"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/trust"
)

// ErrNotPylayer: the manifest is not a pylayer artifact.
var ErrNotPylayer = errors.New("not a pylayer artifact")

// ErrNeedsNetwork: the reference cannot be served from the host cache alone: it is a tag
// (resolved in its repository) or names an artifact the cache does not hold. registry.Ensure
// fetches such a reference; the front end hands its command line to the full binary.
var ErrNeedsNetwork = errors.New("not in the host cache: it needs the network")

// Use is an artifact in the host cache that the current trust policy lets a session use
// from a repository.
type Use struct {
	Root      string          // the layer root (or interpreter prefix) in the cache
	Digest    digest.Digest   // the manifest digest
	Kind      string          // "python" for an interpreter, else the layer's kind (base, ext, iso)
	Admission cache.Admission // the recorded admission the policy accepted
	// Fit is what a stack check reads of a layer's lock (lock.CheckFits), Target the
	// interpreter's target (the other nil): derived from the manifest and config that the
	// cache keeps when they were first checked against each other, and since then read
	// back from the digest's use record (see CheckUse).
	Fit    *lock.Fit
	Target *target.Target
}

// CheckUse decides, with no network, whether digest d, which cache c holds, may be used
// from repository repo (its Ref.Name or Repo.Name) under the current policy pol: one of
// the admissions the cache recorded for d must still count (see trust.Policy.Permits: an
// unsigned admission only in its own repository while its rule still accepts unsigned
// artifacts, a signed one only while a key that signed it is still trusted), and the
// manifest the cache keeps must agree with its lock (CheckConsistent). Refusals wrap
// trust.ErrNotAdmitted, trust.ErrNoPolicy, ErrInconsistent or cache.ErrInvalidCache and say
// what to do.
//
// The policy is decided on every use. Consistency is a function of the digest's bytes
// alone (the manifest is d's, the config is the manifest's), so it is checked in full once:
// the first CheckUse of d (pull's, or a run's on a cache an older pylayer filled) keeps what
// it derived in the cache (cache.SetUseRecord, when the cache is writable), and later uses
// read those few hundred bytes instead of re-parsing, re-validating and re-hashing the
// manifest and lock. A record that is missing, damaged, of another format or of another
// digest is derived again, in full.
func CheckUse(ctx context.Context, c *cache.Cache, pol *trust.Policy, repo string, d digest.Digest) (*Use, error) {
	art := repo + "@" + d.String()
	root, ok := c.Layer(d)
	if !ok {
		return nil, fmt.Errorf("%s: %w: pull it first", art, cache.ErrNotFound)
	}
	recs, err := c.Admissions(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", art, err)
	}
	admitted := make([]trust.Admission, len(recs))
	for i, a := range recs {
		admitted[i] = trust.Admission{Repository: a.Repository, Rule: a.Rule, Unsigned: a.Unsigned}
		for _, s := range a.Signers {
			admitted[i].Signers = append(admitted[i].Signers, trust.Signer{KeyID: s.KeyID, DockerReference: s.DockerReference})
		}
	}
	i, err := pol.Permits(repo, admitted, keyIDs(ctx))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", art, err)
	}
	u := &Use{Root: root, Digest: d, Admission: recs[i]}
	if b, ok := c.UseRecord(d); ok {
		if r, err := parseUseRecord(b, d); err == nil {
			u.Kind, u.Fit, u.Target = r.Kind, r.Layer, r.Interpreter
			return u, nil
		}
	}
	m, config, err := c.Meta(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", art, err)
	}
	l, ic, err := consistent(m, config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", art, err)
	}
	r := useRecord{Format: useRecordFormat, Digest: d.String(), Kind: m.Annotations[oci.AnnotationKind]}
	if r.Kind == "" {
		return nil, fmt.Errorf("%s: the layer has no kind annotation", art)
	}
	if l != nil {
		f, err := l.Fit()
		if err != nil {
			return nil, fmt.Errorf("%s: the layer's lock: %w", art, err)
		}
		r.Layer = &f
	} else {
		t, err := ic.Target()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", art, err)
		}
		r.Interpreter = &t
	}
	if b, err := json.Marshal(r); err == nil {
		_ = c.SetUseRecord(ctx, d, b) // best effort: a cache this user cannot write is checked in full each time
	}
	u.Kind, u.Fit, u.Target = r.Kind, r.Layer, r.Interpreter
	return u, nil
}

// useRecordFormat versions the use record (useRecord) and the checks it stands for: a
// change to what consistent checks, or to what the record holds, bumps it, and records of
// another format are derived again.
const useRecordFormat = 1

// useRecord is what CheckUse keeps of a digest it checked in full (cache.SetUseRecord).
type useRecord struct {
	Format      int            `json:"format"`
	Digest      string         `json:"digest"`
	Kind        string         `json:"kind"`
	Layer       *lock.Fit      `json:"layer,omitempty"`       // a layer's
	Interpreter *target.Target `json:"interpreter,omitempty"` // an interpreter's
}

// parseUseRecord decodes the use record b of d strictly: of this format and digest, with
// exactly one of a valid fit (of a layer of its kind) or a valid target (of an interpreter).
func parseUseRecord(b []byte, d digest.Digest) (*useRecord, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r useRecord
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	switch {
	case r.Format != useRecordFormat:
		return nil, fmt.Errorf("format %d, want %d", r.Format, useRecordFormat)
	case r.Digest != d.String():
		return nil, fmt.Errorf("the record of %q", r.Digest)
	case r.Kind == interp.KindPython:
		if r.Interpreter == nil || r.Layer != nil {
			return nil, errors.New("an interpreter's record without its target alone")
		}
		return &r, nil // UnmarshalJSON validated the target
	case r.Layer == nil || r.Interpreter != nil || string(r.Layer.Kind) != r.Kind:
		return nil, fmt.Errorf("a %q layer's record without its fit alone", r.Kind)
	}
	if err := r.Layer.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// keyIDs reads the IDs of the policy's key files, as sign computes them for signatures.
func keyIDs(ctx context.Context) trust.KeyIDs {
	return func(files []string) ([]string, error) {
		v, err := sign.LoadVerifier(ctx, files...)
		if err != nil {
			return nil, err
		}
		return v.KeyIDs(), nil
	}
}

// IndexRef is the cache ref that records which entry of the image index d in repo this
// host uses: "REPO@sha256:<index>" pointing at the entry's manifest digest.
func IndexRef(repo string, d digest.Digest) string { return repo + "@" + d.String() }

// Ensure makes ref usable from the host cache alone and holds it against gc until release
// is called: ref names a digest the cache holds, or an image index whose entry for this
// host the cache recorded (IndexRef), and CheckUse lets it be used under pol. warn is told
// when the artifact runs unverified by an explicit rule. A tag, or a digest the cache
// lacks, gives an error wrapping ErrNeedsNetwork and holds nothing.
func Ensure(ctx context.Context, c *cache.Cache, ref Ref, pol *trust.Policy, warn func(string)) (*Use, func(), error) {
	if ref.Digest == "" {
		return nil, nil, fmt.Errorf("%s: %w: a tag is resolved in its repository", ref, ErrNeedsNetwork)
	}
	d := ref.Digest
	if _, ok := c.Layer(d); !ok {
		e, err := c.Ref(ctx, IndexRef(ref.Name(), d))
		if err != nil || e == d {
			return nil, nil, fmt.Errorf("%s: %w", ref, ErrNeedsNetwork)
		}
		if _, ok := c.Layer(e); !ok {
			return nil, nil, fmt.Errorf("%s: %w", ref, ErrNeedsNetwork)
		}
		d = e // the index's entry for this host, installed before
	}
	release, err := c.Hold(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	u, err := CheckUse(ctx, c, pol, ref.Name(), d)
	if err != nil {
		release()
		if errors.Is(err, cache.ErrNotFound) { // collected between the look and the hold
			return nil, nil, fmt.Errorf("%s: %w (%w)", ref, ErrNeedsNetwork, err)
		}
		return nil, nil, err
	}
	WarnUnverified(warn, ref.Name(), u)
	return u, release, nil
}

// WarnUnverified tells warn, when u was admitted unsigned (a rule exempts its repository
// from verification), that it is being used from repo unverified. A nil warn is told nothing.
func WarnUnverified(warn func(string), repo string, u *Use) {
	if u.Admission.Unsigned && warn != nil {
		warn(fmt.Sprintf("WARNING: using %s@%s UNVERIFIED: it was admitted unsigned through %s, which the trust policy exempts (rule %q)", repo, u.Digest, u.Admission.Repository, u.Admission.Rule))
	}
}
