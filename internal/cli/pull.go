//go:build !lean

package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/registry"
)

func newPullCmd(g *globals) *cobra.Command {
	f := &regFlags{}
	var platform string
	cmd := &cobra.Command{
		Use: "pull REF --trust cosign.pub",
		Example: `  pylayer pull registry.internal/team/pylayer@sha256:4f1c... --trust cosign.pub
  pylayer pull oci:./out:base --trust cosign.pub --json
  # a multi-platform tag: another platform's entry than the host's
  pylayer pull registry.internal/team/pylayer:current --platform linux/arm64`,
		Short: "Verify and pull a layer into the read-only host cache; prints the layer root",
		Long: `Resolve REF (HOST/repo:tag, HOST/repo@sha256:..., oci:DIR:tag) to a digest, verify its
signature against the trust policy BEFORE fetching anything else, fetch only the blobs the
cache lacks (digest-checked), unpack each wheel once, and assemble the read-only layer root.
Concurrent pulls of one reference share the work; an interrupted pull leaves nothing half
visible. A REF naming a multi-platform image index (pylayer publish with several locks)
pulls the index's entry for this host, or for --platform.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			opts, err := platformOption(platform)
			if err != nil {
				return err
			}
			ref, repo, pol, err := f.openTrusted(cmd, args[0])
			if err != nil {
				return err
			}
			c, err := g.openCache()
			if err != nil {
				return err
			}
			warn := warner(cmd)
			root, v, err := registry.Pull(ctx, repo, ref, pol, c, pullProgress(cmd), warn, opts...)
			if err != nil {
				return err
			}
			if err := c.SetRef(ctx, repo.Name()+"@"+v.Desc.Digest.String(), v.Desc.Digest); err != nil {
				return err
			}
			// The cache's tag names what this host uses: not another platform's entry.
			if ref.Tag != "" && (v.Index == nil || v.Index.Host) {
				if err := c.SetRef(ctx, repo.Name()+":"+ref.Tag, v.Desc.Digest); err != nil {
					return err
				}
			}
			out := map[string]any{"root": root, "digest": v.Desc.Digest.String(), "ref": repo.Name() + "@" + v.Desc.Digest.String(), "verified": !v.Unsigned}
			if v.Index != nil {
				out["index"], out["platform"] = v.Index.Desc.Digest.String(), v.Index.Platform.String()
			}
			return g.print(cmd.OutOrStdout(), out, root)
		},
	}
	f.register(cmd)
	registerPlatform(cmd, &platform)
	return cmd
}

// registerPlatform adds --platform, which picks the entry of a multi-platform image index.
func registerPlatform(cmd *cobra.Command, platform *string) {
	cmd.Flags().StringVar(platform, "platform", "", "of a multi-platform tag, the entry for this platform (os/arch[/variant][+musl], e.g. linux/arm64) instead of the host's")
	complete(cmd, "platform", "linux/amd64", "linux/arm64", "linux/amd64+musl", "linux/arm64+musl")
}

// platformOption is the registry option of --platform ("" is the host's).
func platformOption(platform string) ([]registry.VerifyOption, error) {
	if platform == "" {
		return nil, nil
	}
	p, err := oci.ParsePlatform(platform)
	if err != nil {
		return nil, fmt.Errorf("--platform: %w", err)
	}
	return []registry.VerifyOption{registry.ForPlatform(p)}, nil
}
