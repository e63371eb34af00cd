//go:build !lean

package cli

import (
	"context"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry"
	"github.com/pylayer/pylayer/registry/cache"
)

// bindings is what hostLayers reads of the broker's store.
type bindings interface {
	ListSessions(ctx context.Context, owner string) ([]broker.Session, error)
	Bindings(ctx context.Context, sessionID string) ([]broker.Binding, error)
}

// hostLayers lists and collects the layers of the broker's host: what the host cache holds
// and what the store's sessions are bound to. It is the broker's LayerLister and GCer.
type hostLayers struct {
	store bindings
	cache *cache.Cache
	repo  registry.Repo // the broker's repository; nil when not configured
}

var (
	_ broker.LayerLister = (*hostLayers)(nil)
	_ broker.GCer        = (*hostLayers)(nil)
)

// bound is every digest a session is bound to: its interpreter, base and layers.
func (h *hostLayers) bound(ctx context.Context) (map[string]lock.Kind, error) {
	ss, err := h.store.ListSessions(ctx, "")
	if err != nil {
		return nil, err
	}
	out := map[string]lock.Kind{}
	for _, s := range ss {
		if s.Interpreter != "" {
			out[s.Interpreter] = lock.KindPython
		}
		if s.Base != "" {
			out[s.Base] = lock.KindBase
		}
		bs, err := h.store.Bindings(ctx, s.ID)
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			out[b.Digest] = b.Kind
		}
	}
	return out, nil
}

func (h *hostLayers) Layers(ctx context.Context) ([]broker.Layer, error) {
	bound, err := h.bound(ctx)
	if err != nil {
		return nil, err
	}
	es, err := h.cache.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []broker.Layer
	seen := map[string]bool{}
	for _, e := range es {
		l := broker.Layer{Digest: e.Digest.String(), Size: e.Bytes, Created: e.LastUsed}
		if k, err := assemble.KindOf(e.Root); err == nil {
			l.Kind = k
		}
		if len(e.Refs) > 0 {
			l.Ref = e.Refs[0]
		}
		seen[l.Digest] = true
		out = append(out, l)
	}
	for d, kind := range bound {
		if seen[d] {
			continue
		}
		l := broker.Layer{Digest: d, Kind: kind} // bound, not on this host: ask the registry
		if h.repo != nil {
			if raw, err := h.repo.Manifest(ctx, v1.Descriptor{Digest: digest.Digest(d)}); err == nil {
				if m, err := oci.ParseManifest(raw); err == nil {
					l.Ref, l.Key = h.repo.Name()+"@"+d, m.Annotations[oci.AnnotationKey]
					for _, b := range m.Layers {
						l.Size += b.Size
					}
				}
			}
		}
		out = append(out, l)
	}
	return out, nil
}

func (h *hostLayers) GC(ctx context.Context) (broker.GCReport, error) {
	bound, err := h.bound(ctx)
	if err != nil {
		return broker.GCReport{}, err
	}
	var keep []digest.Digest
	for d := range bound {
		keep = append(keep, digest.Digest(d))
	}
	r, err := h.cache.GC(ctx, -1, keep)
	if err != nil {
		return broker.GCReport{}, err
	}
	rep := broker.GCReport{FreedBytes: r.FreedBytes, Removed: []string{}}
	for _, d := range r.RemovedLayers {
		rep.Removed = append(rep.Removed, d.String())
	}
	return rep, nil
}
