package cli

import (
	"errors"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/oci"
)

type buildFlags struct {
	indexURL    string
	interpreter string
	out         string
}

func newBuildCmd(g *globals) *cobra.Command {
	f := &buildFlags{}
	cmd := &cobra.Command{
		Use: "build LOCK -o oci:DIR",
		Example: `  # build the layer, .pyc compiled by the interpreter sessions will run
  pylayer build base.lock.json -o oci:./out --interpreter /usr/bin/python3.11`,
		Short: "Build the layer artifact of a lock into an OCI layout; prints the manifest digest",
		Long: `Build the OCI artifact of a lock: the lock as config, one reproducible layer blob per
wheel. Wheels are fetched once into the wheelhouse (hash checked) and installed once per
wheel and options; a layer whose key is already in the output is not built again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBuild(cmd, g, f, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.indexURL, "index-url", os.Getenv("PYLAYER_INDEX_URL"), "index to fetch missing wheels from (default $PYLAYER_INDEX_URL; else the lock's URLs)")
	fl.StringVar(&f.interpreter, "interpreter", "", "target interpreter prefix (or python3 binary) to compile .pyc with")
	fl.StringVarP(&f.out, "output", "o", "", "output, oci:DIR (an OCI image layout directory)")
	return cmd
}

type buildResult struct {
	Digest string `json:"digest"`
	Tag    string `json:"tag"`
	Key    string `json:"key"`
	Layout string `json:"layout"`
	Built  bool   `json:"built"` // false when the layout already had this key
}

func runBuild(cmd *cobra.Command, g *globals, f *buildFlags, lockPath string) error {
	ctx := cmd.Context()
	dir, ok := strings.CutPrefix(f.out, "oci:")
	if !ok || dir == "" {
		return errors.New("-o: want oci:DIR, an OCI image layout directory (pushing to a registry is `pylayer publish`)")
	}
	st, err := stampedLock(cmd, g, lockPath, f.indexURL, f.interpreter)
	if err != nil {
		return err
	}
	b, l, tag, key := st.b, st.l, st.tag, st.key
	layout, err := oci.OpenLayout(dir)
	if err != nil {
		return err
	}
	res := buildResult{Tag: tag, Key: key, Layout: dir}
	if d, err := layout.Resolve(ctx, tag); err == nil {
		if _, _, err := layout.Manifest(ctx, d.Digest); err == nil {
			res.Digest = d.Digest.String()
			return g.print(cmd.OutOrStdout(), res, res.Digest)
		}
	}
	a, err := oci.LayerArtifact(ctx, b, l)
	if err != nil {
		return err
	}
	desc, err := layout.Put(ctx, a, tag)
	if err != nil {
		return err
	}
	res.Digest, res.Built = desc.Digest.String(), true
	return g.print(cmd.OutOrStdout(), res, res.Digest)
}
