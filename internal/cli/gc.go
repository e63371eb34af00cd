//go:build !lean

package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newGCCmd(g *globals) *cobra.Command {
	var maxBytes int64
	cmd := &cobra.Command{
		Use: "gc [--max-bytes N]",
		Example: `  pylayer gc                      # remove what nothing refers to
  pylayer gc --max-bytes 21474836480   # and then the oldest unheld layers down to 20 GiB`,
		Short: "Remove cached layers no ref and no running sandbox holds (oldest first, down to --max-bytes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.openCache()
			if err != nil {
				return err
			}
			r, err := c.GC(cmd.Context(), maxBytes, nil)
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), gcReportJSON(r), fmt.Sprintf("removed %d layers and %d trees, freed %s; %d layers kept", len(r.RemovedLayers), len(r.RemovedTrees), human(r.FreedBytes), len(r.Kept)))
		},
	}
	cmd.Flags().Int64Var(&maxBytes, "max-bytes", -1, "keep unreferenced layers while the cache is under this size (-1: remove every unreferenced layer)")
	return cmd
}
