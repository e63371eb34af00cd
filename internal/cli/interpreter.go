//go:build !lean

package cli

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/interp"
	"github.com/pylayer/pylayer/oci/sign"
)

func newInterpreterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "interpreter", Short: "Work with interpreter artifacts (a CPython prefix mounted at /opt/python)"}
	cmd.AddCommand(newInterpreterPublishCmd(g))
	return cmd
}

func newInterpreterPublishCmd(g *globals) *cobra.Command {
	f := &publishFlags{}
	cmd := &cobra.Command{
		Use:     "publish PREFIX|TARBALL --repo REPO --key cosign.key",
		Example: `  pylayer interpreter publish /opt/python3.11 --repo registry.internal/team/pylayer --key ci.key --tag python-current`,
		Short:   "Publish and sign a relocatable CPython prefix as an interpreter artifact; prints REPO@sha256:...",
		Long: `Pack a relocatable CPython prefix (a directory, or a python-build-standalone install_only
tarball) into a signed interpreter artifact. Its config records the version, ABI, platform
tags and marker environment, probed by running the interpreter once, and the in-sandbox
mount path /opt/python. Tagged cpython-<version>-<key>. Its SPDX SBOM (the CPython version
and the prefix's tree digest) is attached as an attestation signed by the same key.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.repo == "" || f.key == "" {
				return errors.New("--repo and --key are required")
			}
			signer, err := sign.LoadSigner(cmd.Context(), f.key, nil)
			if err != nil {
				return err
			}
			cache, err := g.cacheDir()
			if err != nil {
				return err
			}
			work := filepath.Join(cache, "build", "interp")
			if err := os.MkdirAll(work, 0o755); err != nil {
				return err
			}
			tmp, err := os.MkdirTemp(work, ".tmp-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			// For a prefix directory, compile its stdlib's missing .pyc (into a copy) and probe
			// first: the tag follows from the config, and packing the whole prefix (tens of MB)
			// is only needed when the repository lacks that tag. A tarball has to be extracted
			// to be probed, so it is packed up front.
			var cfg interp.Config
			var packed *oci.Artifact
			prefix := args[0]
			if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
				b, err := interp.Compile(cmd.Context(), args[0], tmp)
				if err != nil {
					return err
				}
				prefix = b.Dir
				logctx.From(cmd.Context()).Debug("standard library bytecode", "compiled", b.Compiled, "kept", b.Kept, "skipped", b.Skipped)
				if cfg, err = interp.Probe(cmd.Context(), prefix); err != nil {
					return err
				}
			} else {
				a, c, err := interp.Artifact(cmd.Context(), args[0], tmp)
				if err != nil {
					return err
				}
				cfg, packed = c, &a
			}
			tag, err := interp.TagFor(cfg)
			if err != nil {
				return err
			}
			res, err := publishArtifact(cmd, &f.regFlags, f.repo, signer, f.key, tag, f.tags, func() (oci.Artifact, error) {
				if packed != nil {
					return *packed, nil
				}
				// Pack what was probed: a prefix that changed since is refused by its tree digest.
				return interp.Pack(cmd.Context(), prefix, cfg, tmp)
			})
			if err != nil {
				return err
			}
			canon, err := cfg.Canonical()
			if err != nil {
				return err
			}
			res.Key = interp.KeyOf(canon)
			return g.print(cmd.OutOrStdout(), res, res.Ref)
		},
	}
	f.regFlags.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.repo, "repo", os.Getenv("PYLAYER_REPO"), "repository: HOST[:PORT]/path or oci:DIR (default $PYLAYER_REPO)")
	fl.StringVar(&f.key, "key", "", "cosign private key file (required)")
	fl.StringArrayVar(&f.tags, "tag", nil, "also point this tag at the artifact, e.g. python-current (repeatable)")
	return cmd
}
