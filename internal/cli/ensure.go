package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/sandbox"
)

// probeScript imports every distribution of the layers from inside the sandbox: what a
// session would do first, so a host learns at start-up, not at an agent's first import.
const probeScript = `
import importlib, importlib.metadata as md, json, sys
out = {"python": sys.version.split()[0], "prefix": sys.prefix, "imported": [], "failed": {}}
for d in md.distributions():
    if not any("/opt/pylayer/" in str(p) for p in [getattr(d, "_path", "")]):
        continue
    name = d.metadata["Name"]
    tops = (d.read_text("top_level.txt") or "").split() or [name.replace("-", "_").lower()]
    for t in tops:
        if t.startswith("_"):
            continue
        try:
            importlib.import_module(t)
            out["imported"].append(t)
        except Exception as e:
            out["failed"][t] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
`

type ensureItem struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest,omitempty"`
	Root   string `json:"root,omitempty"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

type ensureReport struct {
	Python   *ensureItem       `json:"python,omitempty"`
	Base     *ensureItem       `json:"base,omitempty"`
	Degraded bool              `json:"degraded"`
	Probe    map[string]any    `json:"probe,omitempty"`
	ProbeErr string            `json:"probe_error,omitempty"`
	OK       bool              `json:"ok"`
	Notes    map[string]string `json:"notes,omitempty"`
}

func newEnsureCmd(g *globals) *cobra.Command {
	f := &regFlags{}
	var python, base string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:     "ensure --python REF --base REF",
		Example: `  pylayer ensure --python reg/team/pylayer:python-current --base reg/team/pylayer:current --trust cosign.pub`,
		Short:   "Host start-up: pull and verify the interpreter and base, probe imports in the sandbox, report",
		Long: `Pull and verify the current interpreter and base layer, then import every distribution of
the base inside a sandbox, and report. Failures (a download, a signature, an import) are
reported in the result, never waited on: ensure always returns promptly, and exits 0 unless
its own arguments are wrong, so a host's start-up goes on in degraded mode.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.openCache()
			if err != nil {
				return err
			}
			rep := ensureReport{}
			spec := sandbox.Spec{Command: []string{"python3", "-c", probeScript}}
			o := f.assembly(cmd, c)
			get := func(ref string) (*ensureItem, *assemble.Layer) {
				it := &ensureItem{Ref: ref}
				l, err := assemble.Ensure(cmd.Context(), o, ref)
				if err != nil {
					it.Error = err.Error()
					return it, nil
				}
				it.OK, it.Digest, it.Root = true, l.Digest.String(), l.Root
				return it, l
			}
			var py *assemble.Layer
			if python != "" {
				it, l := get(python)
				rep.Python = it
				if l != nil {
					defer l.Release()
					if l.Kind != lock.KindPython {
						it.OK, it.Error = false, "not an interpreter artifact"
					} else {
						spec.Interpreter, py = l.Root, l
					}
				}
			}
			if base != "" {
				it, l := get(base)
				rep.Base = it
				if l != nil {
					defer l.Release()
					if err := assemble.Check(py, []*assemble.Layer{l}); err != nil {
						it.OK, it.Error = false, err.Error() // it does not fit the interpreter: not mounted
					} else {
						spec.Layers = []sandbox.Layer{l.Sandbox(0)}
					}
				}
			}
			rep.Degraded = spec.Degraded()
			if rep.Degraded {
				rep.Notes = map[string]string{"degraded": "no interpreter artifact: sessions use the host's /usr/bin/python3"}
			}
			if bwrap, err := sandbox.FindBwrap(); err != nil {
				rep.ProbeErr = err.Error()
			} else if res, err := sandbox.Run(cmd.Context(), bwrap, spec, sandbox.RunOptions{Timeout: timeout}); err != nil {
				rep.ProbeErr = err.Error()
			} else if res.ExitCode != 0 {
				rep.ProbeErr = fmt.Sprintf("probe exited %d: %s", res.ExitCode, res.Stderr)
			} else if err := json.Unmarshal(res.Stdout, &rep.Probe); err != nil {
				rep.ProbeErr = "probe output: " + err.Error()
			} else if failed, _ := rep.Probe["failed"].(map[string]any); len(failed) > 0 {
				rep.ProbeErr = fmt.Sprintf("%d imports failed", len(failed))
			}
			rep.OK = rep.ProbeErr == "" && (rep.Python == nil || rep.Python.OK) && (rep.Base == nil || rep.Base.OK)
			text := fmt.Sprintf("ok=%v degraded=%v", rep.OK, rep.Degraded)
			if rep.ProbeErr != "" {
				text += " probe: " + rep.ProbeErr
			}
			for _, it := range []*ensureItem{rep.Python, rep.Base} {
				if it != nil && !it.OK {
					text += fmt.Sprintf("\n%s: %s", it.Ref, it.Error)
				}
			}
			return g.print(cmd.OutOrStdout(), rep, text)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&python, "python", "", "interpreter artifact reference")
	cmd.Flags().StringVar(&base, "base", "", "base layer reference")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "bound on the import probe")
	return cmd
}
