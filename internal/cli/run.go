package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/registry/local"
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
		Use: "run [--python REF] [--layer REF ...] [--workspace DIR] -- CMD ...",
		Example: `  # a session on an interpreter and a base layer, with a workspace
  pylayer run --python reg/team/pylayer:python-current --layer reg/team/pylayer:current \
    --workspace ./work --trust cosign.pub -- python3 report.py

  # the layers the broker bound to session ses_..., with limits
  pylayer run --session ses_... --broker http://127.0.0.1:8787 --memory 2GiB --timeout 5m -- python3 -c 'import docx'`,
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

func runRun(cmd *cobra.Command, g *globals, f *runFlags, args []string) error {
	ctx := cmd.Context()
	c, err := g.openCache()
	if err != nil {
		return err
	}
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
	// Warnings wait until every layer is settled: a front end that meets a layer the cache
	// lacks hands the whole run to the full binary, which would say them again.
	o := f.assembly(cmd, c)
	var warnings []string
	warn := o.Warn
	o.Warn = func(s string) { warnings = append(warnings, s) }
	held, err := assemble.Assemble(ctx, o, f.python, f.layers)
	if !errors.Is(err, local.ErrNeedsNetwork) {
		for _, s := range warnings {
			warn(s)
		}
	}
	if err != nil {
		return err
	}
	defer held.Release()
	held.Apply(&spec)
	log := logctx.From(ctx)
	if spec.Interpreter != "" {
		log.Debug("mounting interpreter", "root", spec.Interpreter, "at", "/opt/python")
	}
	for _, l := range spec.Layers {
		log.Debug("mounting layer", "kind", l.Kind, "layer", l.Name, "root", l.Root)
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
	if spec.Cache, err = f.cache(c.Root(), f.session); err != nil {
		return err
	}
	spec.Support = filepath.Join(c.Root(), "sandbox") // written once, bound by every session
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
		Stdin: cmd.InOrStdin(), User: f.user}) // a terminal never reaches it (sandbox.Run)
	if err != nil {
		return err
	}
	if g.json {
		// The run's status as the result; the session's output goes into it, so that
		// stdout stays one JSON document.
		if err := g.print(cmd.OutOrStdout(), runJSON{ID: res.ID, ExitCode: res.ExitCode, Signal: res.Signal,
			TimedOut: res.TimedOut, Limit: res.Limit, DurationMS: res.Duration.Milliseconds(),
			Stdout: string(res.Stdout), Stderr: string(res.Stderr),
			StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
			Degraded: spec.Degraded(), HostUID: res.Identity.UID}, ""); err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return ExitCode(res.ExitCode)
		}
		return nil
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

// runJSON is `run --json`: how the run ended, with what it printed.
type runJSON struct {
	ID              string `json:"id"`
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out"`
	Limit           string `json:"limit,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	Degraded        bool   `json:"degraded"`
	HostUID         int    `json:"host_uid"`
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
	as := assemble.Session{ID: s.ID, Interpreter: s.Interpreter, Base: s.Base}
	for _, b := range bs {
		as.Bindings = append(as.Bindings, assemble.Binding{Kind: lock.Kind(b.Kind), Ref: b.Ref})
	}
	return as.Refs(f.repo)
}

// sessionFromBroker asks the broker for the session's env with the token in $PYLAYER_TOKEN
// (never a flag: argv is visible to every user of the host).
func sessionFromBroker(cmd *cobra.Command, base, id string) (broker.Session, []broker.Binding, error) {
	token := os.Getenv("PYLAYER_TOKEN")
	if token == "" {
		return broker.Session{}, nil, errors.New("--broker needs a token in $PYLAYER_TOKEN (the session's agent token, or its owner's)")
	}
	c, err := client.New(base, token)
	if err != nil {
		return broker.Session{}, nil, fmt.Errorf("--broker: %w", err)
	}
	env, err := c.Env(cmd.Context(), id)
	if err != nil {
		return broker.Session{}, nil, fmt.Errorf("asking the broker for session %s: %w", id, err)
	}
	return env.Session, env.Bindings, nil
}
