//go:build !lean

package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry"
)

func newSbomCmd(g *globals) *cobra.Command {
	f := &regFlags{}
	cmd := &cobra.Command{
		Use: "sbom REF --trust cosign.pub",
		Example: `  pylayer sbom registry.internal/team/pylayer@sha256:4f1c... --trust cosign.pub > layer.spdx.json
  cosign verify-attestation --key cosign.pub --insecure-ignore-tlog=true --type spdxjson REF`,
		Short: "Print the SPDX SBOM of a layer or interpreter, after verifying its signed attestation",
		Long: `Resolve REF, verify its signature against the trust policy (as pull and verify do), then
verify the SPDX attestation pylayer publish attached to it (an in-toto statement in a DSSE
envelope, tagged sha256-<hex>.att, as cosign attest --type spdxjson stores it) with the
keys the policy trusts for the repository, and print its SPDX 2.3 JSON document. The
document lists the artifact's wheels by name, version, sha256, purl and declared license
(an interpreter: its CPython version and tree digest). When several trusted SBOMs are
attached, the newest is printed. With --json the document is the spdx_json string of an
object that also names the artifact and the attestation that vouches for it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ref, repo, pol, err := f.openTrusted(cmd, args[0])
			if err != nil {
				return err
			}
			v, err := registry.VerifyRef(ctx, repo, ref, pol, warner(cmd))
			if err != nil {
				return err
			}
			r, err := verifySBOM(ctx, repo, v)
			if err != nil {
				return err
			}
			a := r.Last()
			out := sbomResult{Ref: repo.Name() + "@" + v.Desc.Digest.String(), Digest: v.Desc.Digest.String(),
				Attestation: r.AttestationManifest.Digest.String(), SignedBy: a.KeyID + " (" + a.KeySource + ")", SPDXJSON: string(a.Statement.Predicate)}
			return g.print(cmd.OutOrStdout(), out, out.SPDXJSON)
		},
	}
	f.register(cmd)
	return cmd
}

// sbomResult is sbom --json: SPDX's own keys are camelCase, so the document is a string.
type sbomResult struct {
	Ref         string `json:"ref"`
	Digest      string `json:"digest"`
	Attestation string `json:"attestation"` // digest of the sha256-<hex>.att manifest
	SignedBy    string `json:"signed_by"`   // the trusted key that signed the SBOM printed
	SPDXJSON    string `json:"spdx_json"`
}

// errNoAttestationKey: the policy verifies nothing for the repository, so there is no key
// to check an attestation with.
var errNoAttestationKey = errors.New("no trusted key to verify the SBOM attestation with")

// verifySBOM verifies the SPDX attestations of the artifact v with the keys the trust
// policy named for it, keeping those whose subject name the rule accepts (as VerifyRef
// keeps signatures under require_docker_reference).
func verifySBOM(ctx context.Context, repo registry.Repo, v *registry.Verified) (*sign.AttestationResult, error) {
	art := repo.Name() + "@" + v.Desc.Digest.String()
	if v.Unsigned || len(v.Decision.Keys) == 0 {
		return nil, fmt.Errorf("%s: %w: the trust policy accepts unsigned artifacts from %s (rule %q); trust the publisher's key for it (--trust cosign.pub)",
			art, errNoAttestationKey, repo.Name(), v.Decision.Rule.Match)
	}
	keys, err := sign.LoadVerifier(ctx, v.Decision.Keys...)
	if err != nil {
		return nil, err
	}
	r, err := sign.VerifyAttestations(ctx, repo, v.Desc, sign.PredicateTypeSPDX, keys)
	if err != nil {
		return nil, err
	}
	var kept []sign.Attestation
	var names []string
	for _, a := range r.Verified {
		if v.Decision.AcceptsReference(a.SubjectName) {
			kept = append(kept, a)
		}
		names = append(names, fmt.Sprintf("%q", a.SubjectName))
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("artifact %s: %w: its trusted SBOM attestations name %s, and the trust rule %q requires one that names %s",
			art, registry.ErrReferenceMismatch, strings.Join(names, ", "), v.Decision.Rule.Match, v.Decision.Repository)
	}
	r.Verified = kept
	return r, nil
}

// attestationReport is what verify says of an artifact's SBOM attestation.
type attestationReport struct {
	PredicateType string   `json:"predicate_type"`
	Present       bool     `json:"present"`  // the artifact has an attestation tag (sha256-<hex>.att)
	Verified      bool     `json:"verified"` // one of them is an SPDX SBOM a trusted key signed
	SignedBy      []string `json:"signed_by,omitempty"`
	Manifest      string   `json:"manifest,omitempty"` // digest of the sha256-<hex>.att manifest
	Problem       string   `json:"problem,omitempty"`  // why it is not verified
}

// reportSBOM checks the SBOM attestation of v for verify: a verdict (none, untrusted,
// copied, of another type, no key to check it with) is reported, a failure to read is an
// error.
func reportSBOM(ctx context.Context, repo registry.Repo, v *registry.Verified) (attestationReport, error) {
	rep := attestationReport{PredicateType: sign.PredicateTypeSPDX}
	r, err := verifySBOM(ctx, repo, v)
	if err == nil {
		rep.Present, rep.Verified, rep.Manifest = true, true, r.AttestationManifest.Digest.String()
		for _, a := range r.Verified {
			rep.SignedBy = append(rep.SignedBy, a.KeyID+" ("+a.KeySource+")")
		}
		return rep, nil
	}
	for _, verdict := range []error{sign.ErrNoAttestation, sign.ErrUntrusted, sign.ErrPayloadMismatch, sign.ErrInvalidSignatureManifest,
		registry.ErrReferenceMismatch, errNoAttestationKey} {
		if !errors.Is(err, verdict) {
			continue
		}
		d, terr := repo.Resolve(ctx, sign.AttestationTag(v.Desc.Digest))
		if terr != nil && !errors.Is(terr, registry.ErrNotFound) {
			return rep, terr
		}
		rep.Present, rep.Problem = terr == nil, err.Error()
		if rep.Present {
			rep.Manifest = d.Digest.String()
		}
		return rep, nil
	}
	return rep, err
}

// text is the report's line in verify's text output.
func (r attestationReport) text() string {
	switch {
	case r.Verified:
		ids := make([]string, len(r.SignedBy))
		for i, s := range r.SignedBy {
			ids[i], _, _ = strings.Cut(s, " ")
		}
		return "attested, verified (SPDX, signed by " + strings.Join(ids, ", ") + ")"
	case r.Present:
		return "attested, NOT verified: " + r.Problem
	}
	return "none: " + r.Problem
}
