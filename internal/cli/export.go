//go:build !lean

package cli

import (
	"strings"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/spf13/cobra"
)

func newExportCmd(g *globals) *cobra.Command {
	var format, out string
	cmd := &cobra.Command{
		Use:   "export LOCK --format requirements|pylock [-o FILE]",
		Short: "Write a lock for other tools: a hashed requirements.txt or a PEP 751 pylock.toml",
		Long: `Write LOCK in a format other tools read, to stdout or -o FILE (written atomically):

  requirements  every package pinned with its wheel's sha256, for
                pip install --require-hashes --no-deps --only-binary=:all: -r FILE --index-url URL
  pylock        a PEP 751 pylock.toml (lock-version 1.0): each wheel's file name, URL, size and
                sha256; the lock's key, kind and target under [tool.pylayer]

The output depends on the lock alone: the same lock gives the same bytes.`,
		Example: `  pylayer export base.lock.json --format requirements -o requirements.txt
  pylayer export base.lock.json --format pylock -o pylock.toml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := lock.ReadFile(args[0])
			if err != nil {
				return err
			}
			b, err := lock.Export(l, format)
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			if err := fsx.WriteFile(cmd.Context(), out, b, 0o644); err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), map[string]string{"file": out, "format": format}, out)
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "export format: "+strings.Join(lock.ExportFormats, " or "))
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (default: stdout)")
	_ = cmd.MarkFlagRequired("format")
	complete(cmd, "format", lock.ExportFormats...)
	return cmd
}
