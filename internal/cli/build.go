//go:build !lean

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/native"
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
	// Warnings name each wheel whose compiled code needs shared libraries that are
	// neither in the wheel nor on the target platform's allow-list (printed on stderr too).
	Warnings []string `json:"warnings,omitempty"`
}

// nativeWarnings makes b's builds say, on stderr and in the returned list (complete once
// the build returns), which wheels need shared libraries that a session will not have.
func nativeWarnings(cmd *cobra.Command, b *build.Builder) func() []string {
	var mu sync.Mutex
	var out []string
	b.Options.NativeMissing = func(_ context.Context, t build.Tree, r *native.Report) error {
		msg := build.NativeMessage(t.Package.Filename, r)
		mu.Lock()
		defer mu.Unlock()
		out = append(out, msg)
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+msg)
		return nil
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		sort.Strings(out)
		return out
	}
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
	warnings := nativeWarnings(cmd, b)
	// Each blob goes into the layout as soon as it is packed; Put then finds them there.
	a, err := oci.LayerArtifactWith(ctx, b, l, layout.PutLayerBlob)
	if err != nil {
		return err
	}
	desc, err := layout.Put(ctx, a, tag)
	if err != nil {
		return err
	}
	res.Digest, res.Built, res.Warnings = desc.Digest.String(), true, warnings()
	return g.print(cmd.OutOrStdout(), res, res.Digest)
}
