package registry

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/local"
	"github.com/pylayer/pylayer/registry/trust"
)

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
		if err := c.SetRef(ctx, local.IndexRef(repo.Name(), v.Index.Desc.Digest), v.Desc.Digest); err != nil {
			return "", err
		}
	}
	return root, nil
}

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
	if ref.Digest != "" {
		u, release, err := local.Ensure(ctx, c, ref, pol, warn)
		if !errors.Is(err, local.ErrNeedsNetwork) {
			return u, release, err
		}
	}
	e := &ensurer{c: c, ref: ref, pol: pol, open: open, progress: progress, warn: warn}
	if ref.Digest == "" {
		if err := e.verify(ctx); err != nil {
			return nil, nil, err
		}
		e.ref.Digest = e.v.Desc.Digest
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
	if e.v == nil { // VerifyRef warned already
		local.WarnUnverified(e.warn, e.ref.Name(), u)
	}
	return u, nil
}

// Fetch is Ensure with the repository of each reference opened with o (Open): what
// assemble.Options.Fetch takes, so that assembling layers can pull what the cache lacks.
func Fetch(o Options) func(ctx context.Context, c *cache.Cache, ref Ref, pol *trust.Policy, progress func(cache.Event), warn func(string)) (*Use, func(), error) {
	return func(ctx context.Context, c *cache.Cache, ref Ref, pol *trust.Policy, progress func(cache.Event), warn func(string)) (*Use, func(), error) {
		open := func(ctx context.Context) (Repo, error) { return Open(ctx, ref, o) }
		return Ensure(ctx, c, ref, pol, open, progress, warn)
	}
}
