package cli

import (
	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/registry"
)

func newPullCmd(g *globals) *cobra.Command {
	f := &regFlags{}
	cmd := &cobra.Command{
		Use: "pull REF --trust cosign.pub",
		Example: `  pylayer pull registry.internal/team/pylayer@sha256:4f1c... --trust cosign.pub
  pylayer pull oci:./out:base --trust cosign.pub --json`,
		Short: "Verify and pull a layer into the read-only host cache; prints the layer root",
		Long: `Resolve REF (HOST/repo:tag, HOST/repo@sha256:..., oci:DIR:tag) to a digest, verify its
signature against the trust policy BEFORE fetching anything else, fetch only the blobs the
cache lacks (digest-checked), unpack each wheel once, and assemble the read-only layer root.
Concurrent pulls of one reference share the work; an interrupted pull leaves nothing half
visible.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ref, repo, pol, err := f.openTrusted(cmd, args[0])
			if err != nil {
				return err
			}
			c, err := g.openCache()
			if err != nil {
				return err
			}
			warn := warner(cmd)
			root, v, err := registry.Pull(ctx, repo, ref, pol, c, pullProgress(cmd), warn)
			if err != nil {
				return err
			}
			if err := c.SetRef(ctx, repo.Name()+"@"+v.Desc.Digest.String(), v.Desc.Digest); err != nil {
				return err
			}
			if ref.Tag != "" {
				if err := c.SetRef(ctx, repo.Name()+":"+ref.Tag, v.Desc.Digest); err != nil {
					return err
				}
			}
			out := map[string]any{"root": root, "digest": v.Desc.Digest.String(), "ref": repo.Name() + "@" + v.Desc.Digest.String(), "verified": !v.Unsigned}
			return g.print(cmd.OutOrStdout(), out, root)
		},
	}
	f.register(cmd)
	return cmd
}
