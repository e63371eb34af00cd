//go:build !lean

package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/interp"
	"github.com/pylayer/pylayer/registry"
)

type verifyResult struct {
	Ref        string         `json:"ref"`
	Digest     string         `json:"digest"`
	Verified   bool           `json:"verified"`
	SignedBy   []string       `json:"signed_by"`
	Kind       string         `json:"kind"`
	Key        string         `json:"key"`
	Base       string         `json:"base,omitempty"`
	Target     string         `json:"target"`
	Packages   []lock.Package `json:"packages"`
	Consistent bool           `json:"consistent"` // the layers are the lock's wheels, the key is the lock's
	// Attestation is the artifact's SBOM attestation (pylayer sbom prints the document).
	Attestation attestationReport `json:"attestation"`
	Manifest    json.RawMessage   `json:"-"`
	// Index is the multi-platform image index REF named, of which this is an entry.
	Index *indexReport `json:"index,omitempty"`
}

// indexReport says which image index an artifact was chosen from.
type indexReport struct {
	Digest   string `json:"digest"`
	Platform string `json:"platform"` // the entry's
	Signed   bool   `json:"signed"`   // the index's own signature verified (unsigned indexes are accepted)
}

func (x *indexReport) text() string {
	signed := "unsigned"
	if x.Signed {
		signed = "signed"
	}
	return fmt.Sprintf("the %s entry of image index %s (%s)", x.Platform, x.Digest, signed)
}

func newVerifyCmd(g *globals) *cobra.Command {
	f := &regFlags{}
	var platform string
	cmd := &cobra.Command{
		Use: "verify REF --trust cosign.pub",
		Example: `  pylayer verify registry.internal/team/pylayer:current --trust cosign.pub
  pylayer verify oci:./out@sha256:4f1c... --trust policy.json --json`,
		Short: "Check a layer's signature and SBOM attestation and summarize its signed lock, for auditors",
		Args:  cobra.ExactArgs(1),
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
			v, err := registry.VerifyRef(ctx, repo, ref, pol, warner(cmd), opts...)
			if err != nil {
				return err
			}
			m, err := oci.ParseManifest(v.Manifest)
			if err != nil {
				return err
			}
			res := verifyResult{Ref: repo.Name() + "@" + v.Desc.Digest.String(), Digest: v.Desc.Digest.String(), Verified: !v.Unsigned}
			if v.Index != nil {
				res.Index = &indexReport{Digest: v.Index.Desc.Digest.String(), Platform: v.Index.Platform.String(), Signed: v.Index.Signature != nil}
			}
			if v.Signature != nil {
				for _, s := range v.Signature.Verified {
					res.SignedBy = append(res.SignedBy, s.KeyID+" ("+s.KeySource+")")
				}
			}
			// VerifyRef refused a manifest that contradicts its config (registry.CheckConsistent).
			res.Consistent = true
			if res.Attestation, err = reportSBOM(ctx, repo, v); err != nil {
				return err
			}
			if m.ArtifactType == oci.ArtifactTypePython {
				return printInterpreter(cmd, g, v.Config, res)
			}
			l, err := lock.Parse(v.Config)
			if err != nil {
				return err
			}
			res.Kind, res.Base, res.Target, res.Packages = string(l.Kind), l.Base, l.Target.String(), l.Packages
			res.Key, _ = l.Key()
			if g.json {
				return g.print(cmd.OutOrStdout(), res, "")
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "%s\nsigned by:\t%s\nsbom:\t%s\nkind:\t%s\nkey:\t%s\ntarget:\t%s\n", res.Ref, strings.Join(res.SignedBy, ", "), res.Attestation.text(), res.Kind, res.Key, res.Target)
			if res.Index != nil {
				fmt.Fprintf(w, "index:\t%s\n", res.Index.text())
			}
			if res.Base != "" {
				fmt.Fprintf(w, "base:\t%s\n", res.Base)
			}
			fmt.Fprintln(w, "\nPACKAGE\tVERSION\tWHEEL\tSHA256")
			for _, p := range res.Packages {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Name, p.Version, p.Filename, p.SHA256)
			}
			return w.Flush()
		},
	}
	f.register(cmd)
	registerPlatform(cmd, &platform)
	return cmd
}

// printInterpreter summarizes a verified interpreter artifact.
func printInterpreter(cmd *cobra.Command, g *globals, config []byte, res verifyResult) error {
	cfg, err := interp.ParseConfig(config)
	if err != nil {
		return err
	}
	res.Kind, res.Key = string(lock.KindPython), interp.KeyOf(config)
	if t, err := cfg.Target(); err == nil {
		res.Target = t.String()
	}
	out := struct {
		verifyResult
		Interpreter interp.Config `json:"interpreter"`
	}{res, cfg}
	text := fmt.Sprintf("%s\nsigned by:  %s\nsbom:       %s\nkind:       python (mounted at %s)\nversion:    %s %s %s\n", res.Ref, strings.Join(res.SignedBy, ", "), res.Attestation.text(), cfg.MountPath, cfg.Version, cfg.ABI, cfg.Platform)
	return g.print(cmd.OutOrStdout(), out, strings.TrimSuffix(text, "\n"))
}
