package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/local"
)

// globals are the flags every command shares.
type globals struct {
	json    bool
	verbose bool
	cache   string
}

// New returns the pylayer command tree; run it with ExecuteContext.
func New() *cobra.Command { return newTree("") }

// errFull is what the front end (front.go) returns for a command line that only the full
// binary can serve; Main then hands the whole command line to it, as it does for a run
// whose layers are not all in the host cache (local.ErrNeedsNetwork: the front end has
// no registry protocol).
var errFull = errors.New("needs the full pylayer binary")

// served reports whether root, the command tree of this binary, has the command args
// name: the full binary has every command; the front end only its own, and help,
// completion and unknown names go to the full binary, which lists and checks them all.
func served(root *cobra.Command, args []string) bool {
	c, _, err := root.Find(args)
	return err == nil && c != root
}

// newTree returns the root with every subcommand, or with only the one named only when
// that names one: a command line that starts with a subcommand's name runs that command
// and reads nothing of the others, so building the whole tree (all flags and help texts,
// ~0.15 ms) would only delay every run. help, completion and unknown names get the
// whole tree.
func newTree(only string) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "pylayer",
		Short:         "Python environments as signed, content-addressed OCI layers for sandboxed sessions",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version(),
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			level := slog.LevelInfo
			if g.verbose {
				level = slog.LevelDebug
			}
			l := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			cmd.SetContext(logctx.With(cmd.Context(), l))
		},
	}
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print the result as JSON on stdout")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "log progress and decisions to stderr")
	root.PersistentFlags().StringVar(&g.cache, "cache", "", "cache directory (default $PYLAYER_CACHE, else "+cache.SystemDir+" for root, else the per-user cache dir)")
	for _, c := range commands {
		if c.name == only {
			root.AddCommand(c.new(g))
			return root
		}
	}
	for _, c := range commands {
		root.AddCommand(c.new(g))
	}
	return root
}

// Version is pylayer's version: the module version it was built as (a release tag, or
// "(devel)" from a checkout), with the commit and whether the tree was modified when the
// build recorded them.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " (" + rev[:min(12, len(rev))] + dirty + ")"
	}
	return v + " " + bi.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// cacheDir is --cache, else $PYLAYER_CACHE, else cache.DefaultDir.
func (g *globals) cacheDir() (string, error) {
	if g.cache != "" {
		return filepath.Abs(g.cache)
	}
	if c := os.Getenv("PYLAYER_CACHE"); c != "" {
		return filepath.Abs(c)
	}
	return cache.DefaultDir()
}

// print writes the result: v as JSON with --json, else text.
func (g *globals) print(w io.Writer, v any, text string) error {
	if g.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	_, err := fmt.Fprintln(w, text)
	return err
}

// IsVersion reports whether args asks only for pylayer's version, which Main answers
// before it builds anything.
func IsVersion(args []string) bool { return len(args) == 1 && args[0] == "--version" }

// Main runs the command line args and returns the process's exit status: a sandboxed
// command's own (it already said why it failed), 1 for an error, which it prints to stderr:
// as text, or with --json as {"error": ..., "hint": ...}.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if IsVersion(args) {
		// Answered before the command tree is built: scripts call this to probe for pylayer.
		fmt.Fprintln(stdout, "pylayer version "+Version())
		return 0
	}
	var first string
	if len(args) > 0 {
		first = args[0]
	}
	root := newTree(first)
	if lean && !served(root, args) {
		return forward(args, stderr)
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var code ExitCode
	switch {
	case lean && (errors.Is(err, errFull) || errors.Is(err, local.ErrNeedsNetwork)):
		return forward(args, stderr)
	case errors.As(err, &code):
		return int(code)
	case err == nil:
		return 0
	}
	if f := root.PersistentFlags().Lookup("json"); f != nil && f.Value.String() == "true" {
		out := struct {
			Error string `json:"error"`
			Hint  string `json:"hint,omitempty"`
		}{Error: err.Error()}
		var h interface{ Hint() string }
		if errors.As(err, &h) {
			out.Hint = h.Hint()
		}
		enc := json.NewEncoder(stderr)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(out)
		return 1
	}
	fmt.Fprintln(stderr, "pylayer: error:", err)
	return 1
}
