//go:build !lean

package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/sandbox"
)

type ensureItem struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest,omitempty"`
	Root   string `json:"root,omitempty"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

type ensureReport struct {
	Python   *ensureItem           `json:"python,omitempty"`
	Base     *ensureItem           `json:"base,omitempty"`
	Degraded bool                  `json:"degraded"`
	Probe    *assemble.ProbeResult `json:"probe,omitempty"`
	ProbeErr string                `json:"probe_error,omitempty"`
	OK       bool                  `json:"ok"`
	Notes    map[string]string     `json:"notes,omitempty"`
}

func newEnsureCmd(g *globals) *cobra.Command {
	f := &regFlags{}
	var python, base string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:     "ensure --python REF --base REF",
		Example: `  pylayer ensure --python reg/team/pylayer:python-current --base reg/team/pylayer:current --trust cosign.pub`,
		Short:   "Host start-up: pull and verify the interpreter and base, probe imports in the sandbox, report",
		Long: `Pull and verify the current interpreter and base layer, then import inside a sandbox what
users import from the base: every top-level module of each distribution and the submodules
users reach for (PIL.Image, matplotlib.pyplot, numpy.linalg ...), and report each import
that failed (module, exception, the traceback's last lines) and what imports wrote on
stdout or stderr. Failures (a download, a signature, an import) are reported in the result, never
waited on: ensure always returns promptly, and exits 0 unless its own arguments are wrong,
so a host's start-up goes on in degraded mode.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.openCache()
			if err != nil {
				return err
			}
			rep := ensureReport{}
			var spec sandbox.Spec
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
			} else if rep.Probe, err = assemble.Probe(cmd.Context(), bwrap, spec, sandbox.RunOptions{Timeout: timeout}); err != nil {
				rep.ProbeErr = err.Error()
			} else if n := len(rep.Probe.Failures); n > 0 {
				names := make([]string, n)
				for i, f := range rep.Probe.Failures {
					names[i] = f.Module
				}
				rep.ProbeErr = fmt.Sprintf("%d imports failed: %s", n, strings.Join(names, ", "))
			}
			rep.OK = rep.ProbeErr == "" && (rep.Python == nil || rep.Python.OK) && (rep.Base == nil || rep.Base.OK)
			text := fmt.Sprintf("ok=%v degraded=%v", rep.OK, rep.Degraded)
			if rep.ProbeErr != "" {
				text += " probe: " + rep.ProbeErr
			}
			if rep.Probe != nil {
				if sum := rep.Probe.Summary(); sum != "" {
					text += "\n" + sum
				}
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
