//go:build !lean

package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "ls",
		Example: `  pylayer ls
  pylayer ls --json | jq '.[] | select(.held) | .digest'`,
		Short: "List the layers in the host cache: sizes, refs, and whether a sandbox holds them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.openCache()
			if err != nil {
				return err
			}
			es, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return g.print(cmd.OutOrStdout(), entriesJSON(es), "")
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "DIGEST\tSIZE\tWHEELS\tHELD\tREFS")
			for _, e := range es {
				held := ""
				if e.Held {
					held = "held"
				}
				refs := strings.Join(e.Refs, " ")
				if e.Problem != "" {
					refs = "PROBLEM: " + e.Problem
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", short(e.Digest.String()), human(e.Bytes), len(e.Trees), held, refs)
			}
			return w.Flush()
		},
	}
}
