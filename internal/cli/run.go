package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/stores"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/registry"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/sandbox"
)

type runFlags struct {
	regFlags
	session   string
	db        string
	broker    string
	repo      string
	python    string
	layers    []string
	workspace string
	timeout   time.Duration
	printArgv bool
	env       []string
	maxOutput int64
	sandboxFlags
}

// ExitCode is the error of a run whose sandboxed command exited non-zero: main exits with
// its status without printing anything (the command already said why).
type ExitCode int

func (e ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRunCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run [--python REF] [--layer REF ...] [--workspace DIR] -- CMD ...",
		Short: "Run a command in a bwrap sandbox on verified layers; exits with its status",
		Long: `Pull and verify what is missing (references by digest that are in the cache need no
network), hold the layers against gc while the command runs, and run it in bubblewrap: no
network, read-only system, the interpreter at /opt/python, layers read-only, the workspace
read-write at /workspace, a cleared environment. Without --python the host's /usr/bin/python3
is used (degraded mode, said on stderr).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runRun(cmd, g, f, args) },
	}
	f.regFlags.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.session, "session", "", "run on exactly what this broker session is bound to (needs --db)")
	fl.StringVar(&f.db, "db", os.Getenv("PYLAYER_DB"), "the broker's database, for --session on the broker's host (default $PYLAYER_DB)")
	fl.StringVar(&f.broker, "broker", os.Getenv("PYLAYER_BROKER"), "the broker's URL, for --session on any host; the token comes from $PYLAYER_TOKEN (default $PYLAYER_BROKER)")
	fl.StringVar(&f.repo, "repo", os.Getenv("PYLAYER_REPO"), "repository of the session's interpreter and base, for --session (default $PYLAYER_REPO)")
	fl.StringVar(&f.python, "python", "", "interpreter artifact reference (default: the host's /usr/bin/python3, degraded)")
	fl.StringArrayVar(&f.layers, "layer", nil, "layer reference (repeatable): base, ext or iso")
	fl.StringVar(&f.workspace, "workspace", "", "host directory mounted read-write at /workspace (default: an empty tmpfs)")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "kill the command's whole process group after this long")
	fl.BoolVar(&f.printArgv, "print-argv", false, "print the bwrap argv instead of running (with --json: as JSON)")
	fl.StringArrayVar(&f.env, "env", nil, "pass NAME=VALUE into the sandbox (repeatable; names that look like secrets are refused)")
	fl.Int64Var(&f.maxOutput, "max-output", 1<<20, "cap on each of stdout and stderr, in bytes")
	f.sandboxFlags.register(cmd)
	return cmd
}

// mounted is a layer root in the cache, held for the run.
type mounted struct {
	root    string
	kind    lock.Kind
	digest  digest.Digest
	release func()
}

func runRun(cmd *cobra.Command, g *globals, f *runFlags, args []string) error {
	ctx := cmd.Context()
	c, err := g.openCache()
	if err != nil {
		return err
	}
	var held []mounted
	defer func() {
		for _, m := range held {
			m.release()
		}
	}()
	if f.session != "" {
		if f.python != "" || len(f.layers) > 0 {
			return errors.New("--session mounts what the session is bound to: drop --python and --layer")
		}
		if f.python, f.layers, err = sessionRefs(cmd, f); err != nil {
			return err
		}
	}
	spec := sandbox.Spec{Command: args, Env: map[string]string{}}
	if spec.Limits, err = f.limits(); err != nil {
		return err
	}
	if f.python != "" {
		m, err := ensureLayer(cmd, &f.regFlags, c, f.python)
		if err != nil {
			return fmt.Errorf("--python %s: %w", f.python, err)
		}
		held = append(held, m)
		if m.kind != lock.KindPython {
			return fmt.Errorf("--python %s is a %s layer, not an interpreter", f.python, m.kind)
		}
		spec.Interpreter = m.root
	}
	for i, ref := range f.layers {
		m, err := ensureLayer(cmd, &f.regFlags, c, ref)
		if err != nil {
			return fmt.Errorf("--layer %s: %w", ref, err)
		}
		held = append(held, m)
		if m.kind == lock.KindPython {
			return fmt.Errorf("--layer %s is an interpreter: give it with --python", ref)
		}
		spec.Layers = append(spec.Layers, m.layer(i))
	}
	if f.workspace != "" {
		ws, err := filepath.Abs(f.workspace)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
			return fmt.Errorf("--workspace %s: not a directory", f.workspace)
		}
		spec.Workspace = ws
	}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
		spec.Env[k] = v
	}
	bwrap, err := sandbox.FindBwrap()
	if err != nil {
		return err
	}
	if spec.Degraded() {
		fmt.Fprintln(cmd.ErrOrStderr(), "pylayer: degraded mode: no interpreter artifact given (--python); using the host's /usr/bin/python3")
	}
	if f.printArgv {
		argv, err := sandbox.Argv(bwrap, spec)
		if err != nil {
			return err
		}
		if g.json {
			return g.print(cmd.OutOrStdout(), map[string]any{"argv": argv, "degraded": spec.Degraded()}, "")
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(argv, "\n"))
		return err
	}
	res, err := sandbox.Run(ctx, bwrap, spec, sandbox.RunOptions{Timeout: f.timeout, MaxOutput: f.maxOutput,
		Stdin: sessionStdin(cmd.InOrStdin()), User: f.user})
	if err != nil {
		return err
	}
	sessionOutput(cmd.OutOrStdout(), res.Stdout, f.rawOutput)
	sessionOutput(cmd.ErrOrStderr(), res.Stderr, f.rawOutput)
	if res.TimedOut {
		fmt.Fprintf(cmd.ErrOrStderr(), "pylayer: run %s timed out after %s and was killed\n", res.ID, f.timeout)
	}
	if res.Limit != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "pylayer: run %s was stopped by its %s\n", res.ID, res.Limit)
	}
	if res.ExitCode != 0 {
		return ExitCode(res.ExitCode)
	}
	return nil
}

// ensureLayer returns the cache root of ref, pulling and verifying it when it is missing,
// and holds it against gc. Every use re-checks the current trust policy against how the
// cache admitted the digest (registry.Ensure): a reference by digest that the cache has
// needs no network, and is refused when the policy no longer accepts it.
func ensureLayer(cmd *cobra.Command, f *regFlags, c *cache.Cache, s string) (mounted, error) {
	ref, err := registry.ParseRef(s)
	if err != nil {
		return mounted{}, err
	}
	pol, err := f.policy()
	if err != nil {
		return mounted{}, err
	}
	open := func(ctx context.Context) (registry.Repo, error) { return registry.Open(ctx, ref, f.options(cmd)) }
	u, release, err := registry.Ensure(cmd.Context(), c, ref, pol, open, pullProgress(cmd.ErrOrStderr()), warner(cmd))
	if err != nil {
		return mounted{}, err
	}
	return mounted{root: u.Root, kind: lock.Kind(u.Kind), digest: u.Digest, release: release}, nil
}

// layer is m as layer i of a sandbox. sandbox names kinds with its own constants, as it
// must not import layers (it only needs paths): this is the one place they meet.
func (m mounted) layer(i int) sandbox.Layer {
	return sandbox.Layer{Root: m.root, Kind: string(m.kind), Name: fmt.Sprintf("%d-%s", i, m.kind)}
}

// layerKind reads the kind of an installed layer from the manifest the cache keeps beside it.
func layerKind(root string) (lock.Kind, error) {
	b, err := os.ReadFile(filepath.Join(root, ".pylayer", "manifest.json"))
	if err != nil {
		return "", fmt.Errorf("layer %s: %w", root, err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("layer %s: manifest: %w", root, err)
	}
	if m.ArtifactType == oci.ArtifactTypePython {
		return lock.KindPython, nil
	}
	k := m.Annotations[oci.AnnotationKind]
	if k == "" {
		return "", errors.New("layer " + root + " has no kind annotation")
	}
	return lock.Kind(k), nil
}

// sessionRefs reads what a broker session is bound to, from the broker's API (--broker,
// any host) or its database (--db, the broker's host): its interpreter, its base (unless an
// isolated layer replaces it) and its ext layers, oldest first, all by digest.
func sessionRefs(cmd *cobra.Command, f *runFlags) (string, []string, error) {
	var (
		s   broker.Session
		bs  []broker.Binding
		err error
	)
	switch {
	case f.broker != "":
		s, bs, err = sessionFromBroker(cmd, f.broker, f.session)
	case f.db != "":
		s, bs, err = sessionFromDB(cmd, f.db, f.session)
	default:
		err = errors.New("--session needs the broker: --broker URL (with $PYLAYER_TOKEN) or, on its host, --db PATH")
	}
	if err != nil {
		return "", nil, err
	}
	byDigest := func(d string) (string, error) {
		if f.repo == "" {
			return "", fmt.Errorf("session %s is bound to %s: give its repository with --repo (or PYLAYER_REPO)", s.ID, d)
		}
		return f.repo + "@" + d, nil
	}
	var python string
	if s.Interpreter != "" {
		if python, err = byDigest(s.Interpreter); err != nil {
			return "", nil, err
		}
	}
	var iso string
	var ext []string
	for _, b := range bs {
		switch b.Kind {
		case string(lock.KindIso):
			iso = b.Ref // the newest isolated layer replaces the base
		default:
			ext = append(ext, b.Ref)
		}
	}
	var layers []string
	switch {
	case iso != "":
		layers = append(layers, iso)
	case s.Base != "":
		ref, err := byDigest(s.Base)
		if err != nil {
			return "", nil, err
		}
		layers = append(layers, ref)
	}
	return python, append(layers, ext...), nil
}

func sessionFromDB(cmd *cobra.Command, db, id string) (broker.Session, []broker.Binding, error) {
	store, err := stores.Open(cmd.Context(), db)
	if err != nil {
		return broker.Session{}, nil, err
	}
	defer store.Close()
	s, err := store.GetSession(cmd.Context(), id)
	if err != nil {
		return s, nil, fmt.Errorf("session %s: %w", id, err)
	}
	bs, err := store.Bindings(cmd.Context(), s.ID)
	return s, bs, err
}

// sessionFromBroker asks the broker for the session's env with the token in $PYLAYER_TOKEN
// (never a flag: argv is visible to every user of the host).
func sessionFromBroker(cmd *cobra.Command, base, id string) (broker.Session, []broker.Binding, error) {
	token := os.Getenv("PYLAYER_TOKEN")
	if token == "" {
		return broker.Session{}, nil, errors.New("--broker needs a token in $PYLAYER_TOKEN (the session's agent token, or its owner's)")
	}
	u, err := url.JoinPath(base, "v1", "sessions", id, "env")
	if err != nil {
		return broker.Session{}, nil, fmt.Errorf("--broker %s: %w", base, err)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, u, nil)
	if err != nil {
		return broker.Session{}, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return broker.Session{}, nil, fmt.Errorf("asking the broker for session %s: %w", id, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return broker.Session{}, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Hint string }
		json.Unmarshal(body, &e)
		return broker.Session{}, nil, fmt.Errorf("the broker answered %s for session %s: %s %s", resp.Status, id, e.Error, e.Hint)
	}
	var env broker.Env
	if err := json.Unmarshal(body, &env); err != nil {
		return broker.Session{}, nil, fmt.Errorf("the broker's answer for session %s: %w", id, err)
	}
	return env.Session, env.Bindings, nil
}
