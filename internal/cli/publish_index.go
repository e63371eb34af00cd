//go:build !lean

package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/publish"
)

// publishIndexResult is the --json output of publish with several locks.
type publishIndexResult struct {
	Ref      string              `json:"ref"` // REPO@sha256:... of the image index
	Digest   string              `json:"digest"`
	Tags     []string            `json:"tags"`
	Pushed   bool                `json:"pushed"` // false: the first tag named this index already
	SignedBy string              `json:"signed_by"`
	Entries  []publishIndexEntry `json:"entries"`
}

// publishIndexEntry is one platform's artifact, published as publish with one lock does.
type publishIndexEntry struct {
	Platform string `json:"platform"` // linux/amd64, linux/arm64+musl ...
	Lock     string `json:"lock"`
	publishResult
}

// runPublishIndex publishes the locks, one per platform, and tags the image index of them.
// The locks are read and their platforms checked before anything is built or pushed.
func runPublishIndex(cmd *cobra.Command, g *globals, f *publishFlags, lockPaths []string) error {
	ctx := cmd.Context()
	if err := f.check(); err != nil {
		return err
	}
	if len(f.tags) == 0 {
		return errors.New("--tag is required with several locks: it names the image index that holds them, e.g. --tag current")
	}
	var entries []publish.Entry
	out := publishIndexResult{Tags: f.tags}
	seen := map[oci.Platform]string{}
	var warns []func() []string
	for _, path := range lockPaths {
		st, err := stampedLock(cmd, g, path, f.indexURL, f.interpreter)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		p, err := oci.PlatformOf(st.l.Target.Platform)
		if err != nil {
			return fmt.Errorf("%s: %w: an image index entry needs a linux platform", path, err)
		}
		if prev, ok := seen[p]; ok {
			return fmt.Errorf("%s and %s are both locked for %s: an image index holds one artifact per platform; publish different Pythons under different tags", prev, path, p)
		}
		seen[p] = path
		warns = append(warns, nativeWarnings(cmd, st.b))
		entries = append(entries, publish.Entry{Tag: st.tag, Make: publish.Layer(st.b, st.l)})
		out.Entries = append(out.Entries, publishIndexEntry{Platform: p.String(), Lock: path, publishResult: publishResult{Tag: st.tag, Key: st.key}})
	}
	signer, err := sign.LoadSigner(ctx, f.key, nil)
	if err != nil {
		return err
	}
	ref, repo, err := f.regFlags.open(cmd, f.repo)
	if err != nil {
		return err
	}
	if ref.Tag != "" || ref.Digest != "" {
		return fmt.Errorf("--repo %s: give the repository only; the index's tag is --tag", f.repo)
	}
	res, err := publish.PublishIndex(ctx, repo, entries, signer, f.tags...)
	if err != nil {
		return err
	}
	if ids, err := sign.NewVerifier(f.key, signer); err == nil {
		if k := ids.KeyIDs(); len(k) > 0 {
			out.SignedBy = k[0]
		}
	}
	out.Ref, out.Digest, out.Pushed = res.Ref(repo), res.Desc.Digest.String(), res.Pushed
	var lines []string
	for i, r := range res.Entries {
		e := &out.Entries[i]
		e.Ref, e.Digest, e.Pushed, e.Stats, e.Attestation = r.Ref(repo), r.Desc.Digest.String(), r.Pushed, r.Stats, r.Attestation.Digest.String()
		e.SignedBy, e.Warnings = out.SignedBy, warns[i]()
		lines = append(lines, fmt.Sprintf("%s\t%s", e.Platform, e.Ref))
	}
	if !g.json {
		fmt.Fprintf(cmd.ErrOrStderr(), "image index %s:%s holds\n  %s\n", repo.Name(), strings.Join(f.tags, ","), strings.Join(lines, "\n  "))
	}
	return g.print(cmd.OutOrStdout(), out, out.Ref)
}
