//go:build !lean

package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/registry"
	"github.com/pylayer/pylayer/registry/trust"
)

// fetch pulls what the cache lacks with these flags' registry options.
func (r *regFlags) fetch(cmd *cobra.Command) assemble.Fetcher { return registry.Fetch(r.options(cmd)) }

func (r *regFlags) options(cmd *cobra.Command) registry.Options {
	return registry.Options{CAFile: r.caFile, Insecure: r.insecure, MountFrom: r.mountFrom, UserAgent: "pylayer", Progress: pushProgress(cmd.ErrOrStderr())}
}

// open parses s and opens its repository.
func (r *regFlags) open(cmd *cobra.Command, s string) (registry.Ref, registry.Repo, error) {
	ref, err := registry.ParseRef(s)
	if err != nil {
		return ref, nil, err
	}
	repo, err := registry.Open(cmd.Context(), ref, r.options(cmd))
	return ref, repo, err
}

// openTrusted is how pull and verify start: the trust policy first (a bad one fails before
// any network), then s parsed and its repository opened.
func (r *regFlags) openTrusted(cmd *cobra.Command, s string) (registry.Ref, registry.Repo, *trust.Policy, error) {
	pol, err := r.policy()
	if err != nil {
		return registry.Ref{}, nil, nil, err
	}
	ref, repo, err := r.open(cmd, s)
	return ref, repo, pol, err
}

// pushProgress prints transfer steps on a terminal and nothing otherwise.
func pushProgress(w io.Writer) func(registry.Event) {
	if !isTerminal(w) {
		return nil
	}
	return func(e registry.Event) {
		switch e.Kind {
		case registry.BlobUploaded, registry.BlobExists, registry.BlobMounted, registry.Retrying:
			fmt.Fprintf(w, "%-10s %s %s\n", e.Kind, short(e.Digest.String()), human(e.Size))
		}
	}
}
