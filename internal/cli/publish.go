//go:build !lean

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/publish"
	"github.com/pylayer/pylayer/registry"
)

type publishFlags struct {
	regFlags
	repo        string
	key         string
	indexURL    string
	interpreter string
	tags        []string
}

func newPublishCmd(g *globals) *cobra.Command {
	f := &publishFlags{}
	cmd := &cobra.Command{
		Use: "publish LOCK... --repo REPO --key cosign.key",
		Example: `  # CI: build, push and sign the base, and move the tag new sessions get
  COSIGN_PASSWORD=... pylayer publish base.lock.json --repo registry.internal/team/pylayer --key ci.key \
    --index-url https://pypi.internal/simple --interpreter /usr/bin/python3.11 --tag current

  # the same requirements locked for two platforms, under one multi-platform tag
  pylayer lock -r requirements.txt --python 3.11 --platform manylinux_2_28_x86_64 -o amd64.lock.json
  pylayer lock -r requirements.txt --python 3.11 --platform manylinux_2_28_aarch64 -o arm64.lock.json
  pylayer publish amd64.lock.json arm64.lock.json --repo registry.internal/team/pylayer --key ci.key --tag current`,
		Short: "Build (or reuse), push and sign a layer; prints REPO@sha256:...",
		Long: `Build the layer of a lock (or reuse the one already built for its key), push it to a
registry repository or an OCI layout (oci:DIR) tagged <kind>-<key>, and sign it with a
cosign key (classic tag-based signature, no transparency log; the password comes from
COSIGN_PASSWORD), with its SPDX SBOM attached as an attestation signed by the same key
(cosign verify-attestation --type spdxjson checks it, pylayer sbom prints it). Blobs the
repository has are not uploaded again; an interrupted publish can be run again and
completes.

With several locks (the same requirements locked for different platforms), each is
published as above, and --tag names an OCI image index of them all, signed too, with one
entry per platform (linux/amd64, linux/arm64, ...): pull and run take the host's entry
(pull --platform another). The locks must be of one kind and differ by platform.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return runPublishIndex(cmd, g, f, args)
			}
			return runPublish(cmd, g, f, args[0])
		},
	}
	f.regFlags.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.repo, "repo", os.Getenv("PYLAYER_REPO"), "repository: HOST[:PORT]/path or oci:DIR (default $PYLAYER_REPO)")
	fl.StringVar(&f.key, "key", "", "cosign private key file (required)")
	fl.StringVar(&f.indexURL, "index-url", os.Getenv("PYLAYER_INDEX_URL"), "index to fetch wheels from when building (default $PYLAYER_INDEX_URL, else the lock's URLs)")
	fl.StringVar(&f.interpreter, "interpreter", "", "target interpreter prefix (or python3) to compile .pyc with")
	fl.StringArrayVar(&f.tags, "tag", nil, "also point this tag at the artifact (with several locks: at their image index), e.g. current (repeatable)")
	fl.StringVar(&f.mountFrom, "mount-from", "", "another repository on the same registry whose blobs are mounted instead of uploaded")
	return cmd
}

type publishResult struct {
	Ref      string             `json:"ref"`
	Digest   string             `json:"digest"`
	Tag      string             `json:"tag"`
	Key      string             `json:"key"`
	Pushed   bool               `json:"pushed"` // false: the repository had it already
	Stats    registry.PushStats `json:"stats"`
	SignedBy string             `json:"signed_by"`
	// Attestation is the digest of the manifest tagged sha256-<hex>.att that holds the
	// signed SPDX SBOM (pylayer sbom REF prints it).
	Attestation string `json:"attestation"`
	// Warnings are a build's (see buildResult): none when the repository had the layer.
	Warnings []string `json:"warnings,omitempty"`
}

func (f *publishFlags) check() error {
	if f.repo == "" {
		return errors.New("--repo is required: a registry repository (HOST[:PORT]/path) or oci:DIR")
	}
	if f.key == "" {
		return errors.New("--key is required: the cosign private key to sign with (make one with pylayer keygen)")
	}
	return nil
}

func runPublish(cmd *cobra.Command, g *globals, f *publishFlags, lockPath string) error {
	ctx := cmd.Context()
	if err := f.check(); err != nil {
		return err
	}
	st, err := stampedLock(cmd, g, lockPath, f.indexURL, f.interpreter)
	if err != nil {
		return err
	}
	b, l, tag, key := st.b, st.l, st.tag, st.key
	// Load the key before any transfer, so a wrong password fails fast.
	signer, err := sign.LoadSigner(ctx, f.key, nil)
	if err != nil {
		return err
	}
	warnings := nativeWarnings(cmd, b)
	res, err := publishArtifact(cmd, &f.regFlags, f.repo, signer, f.key, tag, f.tags,
		func() (oci.Artifact, error) { return oci.LayerArtifact(ctx, b, l) })
	if err != nil {
		return err
	}
	res.Key, res.Warnings = key, warnings()
	return g.print(cmd.OutOrStdout(), res, res.Ref)
}

// publishArtifact pushes the artifact make builds (unless repoStr already has tag), signs
// it, attests its SBOM, and points the extra tags at it.
func publishArtifact(cmd *cobra.Command, rf *regFlags, repoStr string, signer sign.Signer, keyPath, tag string, tags []string, make func() (oci.Artifact, error)) (publishResult, error) {
	ctx := cmd.Context()
	res := publishResult{Tag: tag}
	ref, repo, err := rf.open(cmd, repoStr)
	if err != nil {
		return res, err
	}
	if ref.Tag != "" || ref.Digest != "" {
		return res, fmt.Errorf("--repo %s: give the repository only; pylayer chooses the tag", repoStr)
	}
	pub, err := publish.Publish(ctx, repo, tag, func(context.Context) (oci.Artifact, error) { return make() }, signer, tags...)
	if err != nil {
		return res, err
	}
	res.Pushed, res.Stats, res.Attestation = pub.Pushed, pub.Stats, pub.Attestation.Digest.String()
	if ids, err := sign.NewVerifier(keyPath, signer); err == nil {
		if k := ids.KeyIDs(); len(k) > 0 {
			res.SignedBy = k[0]
		}
	}
	res.Digest, res.Ref = pub.Desc.Digest.String(), pub.Ref(repo)
	return res, nil
}

// stampedLock reads the lock at lockPath and returns the host's builder for it (the build
// cache, the index, the interpreter that compiles .pyc) and the lock as that builder
// builds it (build.Builder.Stamp): its key is the layer's.
// stamped is a lock ready to build: its builder, the lock stamped with the interpreter
// that compiles its .pyc, and the tag and key that follow from that.
type stamped struct {
	b        *build.Builder
	l        *lock.Lock
	tag, key string
}

func stampedLock(cmd *cobra.Command, g *globals, lockPath, indexURL, interpreter string) (*stamped, error) {
	l, err := lock.ReadFile(lockPath)
	if err != nil {
		return nil, err
	}
	cache, err := g.cacheDir()
	if err != nil {
		return nil, err
	}
	interp, err := build.Interpreter(interpreter)
	if err != nil {
		return nil, err
	}
	// The user's own lock pinned every wheel's hash: C may inflate them.
	b := &build.Builder{Root: filepath.Join(cache, "build"), Options: build.Options{Interpreter: interp, TrustedWheels: true}}
	src := indexURL
	if src == "" && len(l.Packages) > 0 {
		src = l.Packages[0].URL
	}
	if src != "" {
		c, err := index.New(src)
		if err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
		b.Fetcher = c
	}
	if l, err = b.Stamp(cmd.Context(), l); err != nil {
		return nil, err
	}
	tag, key, err := l.Tag()
	if err != nil {
		return nil, err
	}
	return &stamped{b: b, l: l, tag: tag, key: key}, nil
}
