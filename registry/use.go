package registry

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/interp"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/trust"
)

// Use is an artifact in the host cache that the current trust policy lets a session use
// from a repository.
type Use struct {
	Root      string          // the layer root (or interpreter prefix) in the cache
	Digest    digest.Digest   // the manifest digest
	Manifest  *v1.Manifest    // as the cache keeps it, checked against Digest and its lock
	Kind      string          // "python" for an interpreter, else the layer's kind (base, ext, iso)
	Config    []byte          // the config blob (the lock, or the interpreter config), checked against Manifest
	Admission cache.Admission // the recorded admission the policy accepted
	// Lock is Config parsed, for a layer; Interpreter for an interpreter (the other nil):
	// what the consistency check read, so that a use parses its config once.
	Lock        *lock.Lock
	Interpreter *interp.Config
}

// CheckUse decides, with no network, whether digest d, which cache c holds, may be used
// from repository repo (its Ref.Name or Repo.Name) under the current policy pol: one of
// the admissions the cache recorded for d must still count (see trust.Policy.Permits: an
// unsigned admission only in its own repository while its rule still accepts unsigned
// artifacts, a signed one only while a key that signed it is still trusted), and the
// manifest the cache keeps must still agree with its lock (CheckConsistent). Refusals wrap
// trust.ErrNotAdmitted, trust.ErrNoPolicy, ErrInconsistent or cache.ErrInvalidCache and say
// what to do.
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
	m, config, err := c.Meta(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", art, err)
	}
	u.Manifest, u.Config = m, config
	if u.Lock, u.Interpreter, err = consistent(m, config); err != nil {
		return nil, fmt.Errorf("%s: %w", art, err)
	}
	u.Kind = u.Manifest.Annotations[oci.AnnotationKind]
	if u.Kind == "" {
		return nil, fmt.Errorf("%s: the layer has no kind annotation", art)
	}
	return u, nil
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

// admission is the record of how v was admitted through its repository.
func (v *Verified) admission() cache.Admission {
	a := cache.Admission{Repository: v.Decision.Repository, Rule: v.Decision.Rule.Match, Unsigned: v.Unsigned}
	if v.Signature != nil {
		for _, s := range v.Signature.Verified {
			a.Signers = append(a.Signers, cache.Signer{KeyID: s.KeyID, DockerReference: s.DockerReference})
		}
	}
	return a
}

// install puts v into the cache, fetching only the blobs it lacks (never the config: v
// has it, checked), and records how it was admitted. It returns the layer root.
func install(ctx context.Context, c *cache.Cache, repo Repo, v *Verified, progress func(cache.Event)) (string, error) {
	m, err := oci.ParseManifest(v.Manifest)
	if err != nil {
		return "", err
	}
	fetch := func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
		if d.Digest == m.Config.Digest {
			return io.NopCloser(bytes.NewReader(v.Config)), nil
		}
		return repo.Blob(ctx, d)
	}
	root, err := c.Install(ctx, v.Desc.Digest, v.Manifest, fetch, progress)
	if err != nil {
		return "", err
	}
	if err := c.Admit(ctx, v.Desc.Digest, v.admission()); err != nil {
		return "", err
	}
	if v.Index != nil && v.Index.Host {
		// REPO@INDEX stands for this host's entry from now on: Ensure uses it offline.
		if err := c.SetRef(ctx, indexRef(repo.Name(), v.Index.Desc.Digest), v.Desc.Digest); err != nil {
			return "", err
		}
	}
	return root, nil
}

// indexRef is the cache ref that records which entry of the image index d in repo this
// host uses: "REPO@sha256:<index>" pointing at the entry's manifest digest.
func indexRef(repo string, d digest.Digest) string { return repo + "@" + d.String() }

// Ensure makes ref usable from the host cache and holds it against gc until release is
// called. A tag is resolved and verified (network); an artifact the cache lacks is verified
// and installed, and a ref REPO@DIGEST keeps it from gc, as pylayer pull does. Whatever
// the path, the artifact is then checked with CheckUse against the current policy, from
// what the cache recorded: a reference by digest that the cache holds needs no network,
// and is refused at once when the policy no longer accepts how it was admitted. open opens
// ref's repository and is called only when the network is needed; warn is told, on every
// use, when an artifact runs unverified by an explicit rule.
//
// A ref naming an image index uses the index's entry for this host (VerifyRef); a digest
// of an index whose entry this host installed before needs no network either, through the
// cache ref REPO@INDEX that install records.
func Ensure(ctx context.Context, c *cache.Cache, ref Ref, pol *trust.Policy, open func(context.Context) (Repo, error), progress func(cache.Event), warn func(string)) (*Use, func(), error) {
	e := &ensurer{c: c, ref: ref, pol: pol, open: open, progress: progress, warn: warn}
	if ref.Digest == "" {
		if err := e.verify(ctx); err != nil {
			return nil, nil, err
		}
		e.ref.Digest = e.v.Desc.Digest
	} else if _, ok := c.Layer(ref.Digest); !ok {
		if d, err := c.Ref(ctx, indexRef(ref.Name(), ref.Digest)); err == nil && d != ref.Digest {
			if _, ok := c.Layer(d); ok {
				e.ref.Digest = d // the index's entry for this host, installed before
			}
		}
	}
	release, err := c.Hold(ctx, e.ref.Digest)
	if err != nil {
		return nil, nil, err
	}
	u, err := e.use(ctx)
	if err != nil {
		release()
		return nil, nil, err
	}
	if u.Digest != e.ref.Digest { // ref named an image index: hold its entry instead
		keep, err := c.Hold(ctx, u.Digest)
		release()
		if err != nil {
			return nil, nil, err
		}
		release = keep
	}
	return u, release, nil
}

// ensurer is one Ensure: repo and v are set once the repository was opened and ref verified.
type ensurer struct {
	c        *cache.Cache
	ref      Ref
	pol      *trust.Policy
	open     func(context.Context) (Repo, error)
	progress func(cache.Event)
	warn     func(string)
	repo     Repo
	v        *Verified
}

func (e *ensurer) verify(ctx context.Context) error {
	var err error
	if e.repo, err = e.open(ctx); err != nil {
		return err
	}
	e.v, err = VerifyRef(ctx, e.repo, e.ref, e.pol, e.warn)
	return err
}

// use installs what the cache lacks, records a verification made now, and checks the use.
func (e *ensurer) use(ctx context.Context) (*Use, error) {
	d := e.ref.Digest
	verified := e.v != nil
	if _, ok := e.c.Layer(d); !ok {
		if e.v == nil {
			if err := e.verify(ctx); err != nil {
				return nil, err
			}
		}
		if d != e.v.Desc.Digest { // d is an image index: its entry for this host is used
			d = e.v.Desc.Digest
			release, err := e.c.Hold(ctx, d)
			if err != nil {
				return nil, err
			}
			defer release()
		}
		if _, err := install(ctx, e.c, e.repo, e.v, e.progress); err != nil {
			return nil, err
		}
		if err := e.c.SetRef(ctx, e.repo.Name()+"@"+d.String(), d); err != nil {
			return nil, err
		}
	} else if verified {
		// Verified just now, against the current policy: that is an admission too.
		if err := e.c.Admit(ctx, d, e.v.admission()); err != nil {
			return nil, err
		}
	}
	u, err := CheckUse(ctx, e.c, e.pol, e.ref.Name(), d)
	if err != nil {
		return nil, err
	}
	if u.Admission.Unsigned && e.v == nil && e.warn != nil {
		e.warn(fmt.Sprintf("WARNING: using %s@%s UNVERIFIED: it was admitted unsigned through %s, which the trust policy exempts (rule %q)", e.ref.Name(), d, u.Admission.Repository, u.Admission.Rule))
	}
	return u, nil
}
