package assemble

import (
	"context"
	"errors"
	"fmt"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/local"
	"github.com/pylayer/pylayer/registry/trust"
	"github.com/pylayer/pylayer/sandbox"
)

// Options say where layers come from and what they must satisfy.
type Options struct {
	Cache *cache.Cache
	// Policy loads the trust policy, at each Ensure (a caller that has a policy loaded
	// returns it); it returning nil refuses every pull with what to do. nil: no policy.
	Policy func() (*trust.Policy, error)
	// Fetch makes a reference usable when the cache alone cannot (a tag, a digest not
	// pulled yet): registry.Fetch with the options a repository is opened with. nil keeps
	// Ensure offline (local.Ensure): such a reference fails with local.ErrNeedsNetwork,
	// and pylayer's front end, which links no registry protocol, hands the command to
	// the full binary.
	Fetch    Fetcher
	Progress func(cache.Event)
	Warn     func(string) // told on every use of an artifact a rule lets run unverified
}

// Fetcher is registry.Ensure with its repository's options bound (registry.Fetch): it
// makes ref usable from cache c under pol, from the network when it must, and holds it
// until release is called.
type Fetcher func(ctx context.Context, c *cache.Cache, ref local.Ref, pol *trust.Policy, progress func(cache.Event), warn func(string)) (u *local.Use, release func(), err error)

// Layer is an artifact in the host cache, held against gc until Release.
type Layer struct {
	Ref    string // as given
	Root   string // the layer root (or interpreter prefix) in the cache
	Kind   lock.Kind
	Digest digest.Digest

	fit     *lock.Fit      // what Check reads of a layer's lock
	target  *target.Target // what Check reads of an interpreter's config
	release func()
}

// Ensure returns the cache root of ref, pulling and verifying it when it is missing, and
// holds it against gc until Release. Every use re-checks the current trust policy against
// how the cache admitted the digest (local.Ensure): a reference by digest that the cache
// has needs no network, and is refused when the policy no longer accepts it.
func Ensure(ctx context.Context, o Options, ref string) (*Layer, error) {
	r, err := local.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if o.Cache == nil {
		return nil, errors.New("assemble: Options.Cache is required")
	}
	var pol *trust.Policy
	if o.Policy != nil {
		if pol, err = o.Policy(); err != nil {
			return nil, err
		}
	}
	var u *local.Use
	var release func()
	if o.Fetch != nil {
		u, release, err = o.Fetch(ctx, o.Cache, r, pol, o.Progress, o.Warn)
	} else {
		u, release, err = local.Ensure(ctx, o.Cache, r, pol, o.Warn)
	}
	if err != nil {
		return nil, err
	}
	return &Layer{Ref: ref, Root: u.Root, Kind: lock.Kind(u.Kind), Digest: u.Digest, fit: u.Fit,
		target: u.Target, release: release}, nil
}

// Release lets gc collect the layer again (once no other use holds it). It is safe to call
// more than once and on nil.
func (l *Layer) Release() {
	if l != nil && l.release != nil {
		l.release()
		l.release = nil
	}
}

// Sandbox is l as layer i of a sandbox. sandbox names kinds with its own constants, as it
// must not import layers (it only needs paths): this is the one place they meet.
func (l *Layer) Sandbox(i int) sandbox.Layer {
	return sandbox.Layer{Root: l.Root, Kind: string(l.Kind), Name: fmt.Sprintf("%d-%s", i, l.Kind)}
}

// Env is an interpreter and layers held for one sandbox.
type Env struct {
	Interpreter *Layer   // nil: degraded mode, the host's /usr/bin/python3
	Layers      []*Layer // in mount order
}

// Release releases every layer of e.
func (e *Env) Release() {
	if e == nil {
		return
	}
	e.Interpreter.Release()
	for _, l := range e.Layers {
		l.Release()
	}
}

// Apply sets the interpreter and layers of spec to e's.
func (e *Env) Apply(spec *sandbox.Spec) {
	spec.Interpreter = ""
	if e.Interpreter != nil {
		spec.Interpreter = e.Interpreter.Root
	}
	spec.Layers = nil
	for i, l := range e.Layers {
		spec.Layers = append(spec.Layers, l.Sandbox(i))
	}
}

// Assemble ensures python (an interpreter artifact, or "" for degraded mode) and layers
// (base, ext or iso, in mount order), holds them all and checks that they fit together
// (Check: Python, ABI, platform, the base of every ext layer). On an error it releases what it
// held; the error names the reference as the flag that gave it (--python, --layer).
func Assemble(ctx context.Context, o Options, python string, layers []string) (*Env, error) {
	if o.Policy != nil { // one sandbox is decided on one reading of the policy
		pol, err := o.Policy()
		if err != nil {
			return nil, err
		}
		o.Policy = func() (*trust.Policy, error) { return pol, nil }
	}
	e := &Env{}
	if python != "" {
		l, err := Ensure(ctx, o, python)
		if err != nil {
			return nil, fmt.Errorf("--python %s: %w", python, err)
		}
		e.Interpreter = l
		if l.Kind != lock.KindPython {
			e.Release()
			return nil, fmt.Errorf("--python %s is a %s layer, not an interpreter", python, l.Kind)
		}
	}
	for _, ref := range layers {
		l, err := Ensure(ctx, o, ref)
		if err != nil {
			e.Release()
			return nil, fmt.Errorf("--layer %s: %w", ref, err)
		}
		e.Layers = append(e.Layers, l)
		if l.Kind == lock.KindPython {
			e.Release()
			return nil, fmt.Errorf("--layer %s is an interpreter: give it with --python", ref)
		}
	}
	if err := Check(e.Interpreter, e.Layers); err != nil {
		e.Release()
		return nil, err
	}
	return e, nil
}
