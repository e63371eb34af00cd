//go:build !lean

package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/resolve"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/interp"
	"github.com/pylayer/pylayer/registry"
)

type lockFlags struct {
	regFlags
	reqFiles    []string
	constraints []string
	indexURL    string
	python      string
	platform    string
	pythonFrom  string
	kind        string
	pre         bool
	out         string
}

func newLockCmd(g *globals) *cobra.Command {
	f := &lockFlags{}
	cmd := &cobra.Command{
		Use: "lock [REQ ...] -o FILE",
		Example: `  # a base lock for CPython 3.11 on manylinux_2_28 x86_64
  pylayer lock python-docx openpyxl --python 3.11 --platform manylinux_2_28_x86_64 -o base.lock.json

  # from a (hashed) requirements file, against a private index
  pylayer lock -r requirements.txt --index-url https://pypi.internal/simple -o base.lock.json

  # an ext lock: what a session adds over that base, living with its pins
  pylayer lock --kind ext -c base.lock.json numpy -o numpy.lock.json`,
		Short: "Resolve requirements to wheels and write a lock; prints its key",
		Long: `Resolve requirements (wheels only) for a target and write the canonical lock.
The key, the sha256 of the lock's canonical bytes, is printed on stdout.

An ext layer is the delta over a base: give the base lock with -c BASE.lock.json and
--kind ext. With another kind, a lock given to -c constrains versions; a .txt file given to
-c is a pip-style constraints file. Constraints narrow, they never add a package.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLock(cmd, g, f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.reqFiles, "requirement", "r", nil, "read requirements from a requirements.txt file (repeatable)")
	fl.StringArrayVarP(&f.constraints, "constraint", "c", nil, "constrain versions with a lock (.json) or constraints file (repeatable)")
	fl.StringVar(&f.indexURL, "index-url", os.Getenv("PYLAYER_INDEX_URL"), "simple-API index URL (default $PYLAYER_INDEX_URL)")
	fl.StringVar(&f.python, "python", "", "target Python version, e.g. 3.11 or 3.11.7")
	fl.StringVar(&f.platform, "platform", "", "target platform floor, e.g. manylinux_2_28_x86_64")
	fl.StringVar(&f.pythonFrom, "python-from", "", "take the target from an interpreter: a python3 binary (probed once) or an interpreter artifact reference (verified)")
	fl.StringVar(&f.kind, "kind", "base", "layer kind: base, ext (delta over -c BASE.lock.json) or iso")
	complete(cmd, "kind", string(lock.KindBase), string(lock.KindExt), string(lock.KindIso))
	complete(cmd, "python", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
	complete(cmd, "platform", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64", "manylinux_2_17_aarch64",
		"manylinux_2_28_aarch64", "manylinux_2_34_aarch64", "musllinux_1_2_x86_64", "musllinux_1_2_aarch64")
	fl.BoolVar(&f.pre, "pre", false, "allow pre-releases for every package")
	fl.StringVarP(&f.out, "output", "o", "", "where to write the lock (required)")
	f.regFlags.register(cmd)
	return cmd
}

type lockResult struct {
	Key      string        `json:"key"`
	Lock     string        `json:"lock"`
	Kind     string        `json:"kind"`
	Base     string        `json:"base,omitempty"`
	Packages []pkgVersion  `json:"packages"`
	Target   target.Target `json:"target"`
}

type pkgVersion struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

func runLock(cmd *cobra.Command, g *globals, f *lockFlags, args []string) error {
	ctx := cmd.Context()
	if f.out == "" {
		return errors.New("-o FILE is required: where to write the lock")
	}
	kind, err := lock.ParseKind(f.kind)
	if err != nil {
		return fmt.Errorf("--kind: %w", err)
	}
	var reqs []pep508.Requirement
	for _, a := range args {
		r, err := pep508.ParseRequirement(a)
		if err != nil {
			return fmt.Errorf("requirement %q: %w", a, err)
		}
		reqs = append(reqs, r)
	}
	var fileLines []pep508.ReqFileLine
	for _, path := range f.reqFiles {
		rf, err := pep508.ReadRequirementsFile(ctx, path)
		if err != nil {
			return err
		}
		if len(rf.ExtraIndexURLs) > 0 {
			return fmt.Errorf("-r %s: --extra-index-url %s: pylayer locks from one index, so that where each wheel came from is never a race between indexes; serve every package from one index and name it with --index-url",
				path, rf.ExtraIndexURLs[0])
		}
		if rf.IndexURL != "" {
			switch {
			case !cmd.Flags().Changed("index-url"):
				f.indexURL = rf.IndexURL
			case rf.IndexURL != f.indexURL:
				return fmt.Errorf("%s: --index-url %s, but the command line names %s: give one", rf.Where, rf.IndexURL, f.indexURL)
			}
		}
		fileLines = append(fileLines, rf.Lines...)
		for _, l := range rf.Lines {
			reqs = append(reqs, l.Req)
		}
	}
	if len(reqs) == 0 {
		return errors.New("nothing to lock: give requirements as arguments or with -r FILE")
	}

	var base *lock.Lock
	var constraints []pep508.Requirement
	for _, path := range f.constraints {
		if strings.HasSuffix(path, ".json") {
			l, err := lock.ReadFile(path)
			if err != nil {
				return fmt.Errorf("-c: %w", err)
			}
			if kind == lock.KindExt {
				if base != nil {
					return errors.New("-c: an ext layer has exactly one base lock")
				}
				if l.Kind != lock.KindBase {
					return fmt.Errorf("-c %s: an ext layer stacks on a base lock, this one is %s", path, l.Kind)
				}
				base = l
				continue
			}
			for _, p := range l.Packages {
				constraints = append(constraints, pep508.Requirement{Name: p.Name, Specifier: mustSpec("==" + p.Version)})
			}
			continue
		}
		lines, err := pep508.ParseRequirementsFile(ctx, path)
		if err != nil {
			return fmt.Errorf("-c: %w", err)
		}
		for _, l := range lines {
			constraints = append(constraints, l.Req)
		}
	}
	if kind == lock.KindExt && base == nil {
		return errors.New("an ext layer needs its base: give -c BASE.lock.json")
	}

	if f.indexURL == "" {
		return errors.New("--index-url is required (or set PYLAYER_INDEX_URL, or an --index-url line in the -r file)")
	}
	tgt, err := resolveTarget(cmd, f, base)
	if err != nil {
		return err
	}
	cache, err := g.cacheDir()
	if err != nil {
		return err
	}
	// Wheel metadata is kept by file hash: a second lock reads none of it again, from
	// any index or mirror that lists the same files.
	client, err := index.New(f.indexURL, index.WithMetadataCache(filepath.Join(cache, "metadata")))
	if err != nil {
		return fmt.Errorf("--index-url: %w", err)
	}
	wh := &build.Builder{Root: filepath.Join(cache, "build"), Fetcher: client}
	l, err := resolve.NewLock(ctx, client, wh, resolve.LockSpec{Kind: kind, Target: tgt, Base: base,
		Requirements: reqs, Constraints: constraints, Pre: f.pre})
	if err != nil {
		return fmt.Errorf("cannot lock: %w", err)
	}
	if err := l.CheckHashes(fileLines); err != nil {
		return fmt.Errorf("cannot lock: %w", err)
	}
	res := lockResult{Lock: f.out, Kind: string(kind), Base: l.Base, Target: tgt}
	for _, p := range l.Packages {
		res.Packages = append(res.Packages, pkgVersion{p.Name, p.Version})
	}
	key, err := lock.WriteFile(f.out, l)
	if err != nil {
		return err
	}
	res.Key = key
	return g.print(cmd.OutOrStdout(), res, key)
}

func resolveTarget(cmd *cobra.Command, f *lockFlags, base *lock.Lock) (target.Target, error) {
	var (
		t   target.Target
		err error
	)
	switch {
	case f.pythonFrom != "":
		if f.python != "" || f.platform != "" {
			return t, errors.New("give either --python-from or --python/--platform, not both")
		}
		if fi, statErr := os.Stat(f.pythonFrom); statErr == nil && !fi.IsDir() {
			t, err = target.Probe(cmd.Context(), f.pythonFrom)
		} else {
			t, err = targetFromArtifact(cmd, &f.regFlags, f.pythonFrom)
		}
		if err != nil {
			return t, fmt.Errorf("--python-from %s: %w", f.pythonFrom, err)
		}
	case f.python != "" || f.platform != "":
		if f.python == "" || f.platform == "" {
			return t, errors.New("--python and --platform go together (e.g. --python 3.11 --platform manylinux_2_28_x86_64)")
		}
		t, err = target.FromFlags(f.python, f.platform)
		if err != nil {
			return t, err
		}
	case base != nil:
		return base.Target, nil
	default:
		return t, errors.New("no target: give --python 3.11 --platform manylinux_2_28_x86_64, or --python-from /path/to/python3")
	}
	if base != nil && !sameTarget(t, base.Target) {
		return t, fmt.Errorf("the target differs from the base lock's (%s); an ext layer is built for its base's target: drop --python/--platform", base.Target.String())
	}
	return t, nil
}

func sameTarget(a, b target.Target) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

func mustSpec(s string) pep440.SpecifierSet {
	spec, err := pep440.ParseSpecifierSet(s)
	if err != nil {
		panic(err)
	}
	return spec
}

// targetFromArtifact reads the target an interpreter artifact records, after verifying its
// signature like a pull would.
func targetFromArtifact(cmd *cobra.Command, rf *regFlags, s string) (target.Target, error) {
	ctx := cmd.Context()
	pol, err := rf.policy()
	if err != nil {
		return target.Target{}, err
	}
	ref, repo, err := rf.open(cmd, s)
	if err != nil {
		return target.Target{}, fmt.Errorf("not a file, and not a usable artifact reference: %w", err)
	}
	v, err := registry.VerifyRef(ctx, repo, ref, pol, warner(cmd))
	if err != nil {
		return target.Target{}, err
	}
	m, err := oci.ParseManifest(v.Manifest)
	if err != nil {
		return target.Target{}, err
	}
	if m.ArtifactType != oci.ArtifactTypePython || m.Config.Size > interp.MaxConfigBytes {
		return target.Target{}, fmt.Errorf("%s is not an interpreter artifact", s)
	}
	rc, err := repo.Blob(ctx, m.Config)
	if err != nil {
		return target.Target{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return target.Target{}, err
	}
	cfg, err := interp.ParseConfig(b)
	if err != nil {
		return target.Target{}, err
	}
	return cfg.Target()
}
