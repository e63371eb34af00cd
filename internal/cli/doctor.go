//go:build !lean

package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/assemble"
	"github.com/pylayer/pylayer/sandbox"
)

type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type doctorResult struct {
	Checks []check         `json:"checks"`
	Cache  doctorCacheJSON `json:"cache"`
}

func newDoctorCmd(g *globals) *cobra.Command {
	var repair bool
	var python string
	f := &regFlags{}
	cmd := &cobra.Command{
		Use: "doctor [--repair] [--python REF]",
		Example: `  pylayer doctor
  pylayer doctor --python registry.internal/team/pylayer:python-current --trust cosign.pub
  pylayer doctor --repair        # remove broken or half-written cache entries`,
		Short: "Check the host: bwrap and namespaces, the interpreter in the sandbox, the trust policy, the cache",
		Long: `Check what sessions on this host need: bwrap is present and can create namespaces, the
interpreter runs inside the sandbox (or degraded mode is said plainly), a trust policy is
set, and the cache is sound (every tree re-hashed against its file list, every layer's
links checked). With --repair, damaged trees and layers are removed so the next pull
fetches them again. Exits non-zero when a check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var res doctorResult
			add := func(name string, err error, ok string) {
				c := check{Name: name, OK: err == nil, Detail: ok}
				if err != nil {
					c.Detail = err.Error()
				}
				res.Checks = append(res.Checks, c)
			}
			bwrap, err := sandbox.FindBwrap()
			if err == nil {
				err = sandbox.Check(ctx, bwrap)
			}
			add("bwrap", err, "present at "+bwrap+", can create namespaces")
			c, err := g.openCache()
			if err != nil {
				return err
			}
			spec := sandbox.Spec{Command: []string{"python3", "-c", "import sys; print(sys.version.split()[0], sys.prefix)"}}
			interp := "degraded mode: no interpreter artifact given (--python); sessions use the host's /usr/bin/python3"
			if python != "" {
				l, err := assemble.Ensure(ctx, f.assembly(cmd, c), python)
				if err != nil {
					add("interpreter", err, "")
				} else {
					defer l.Release()
					spec.Interpreter = l.Root
					interp = "interpreter artifact " + l.Digest.String()
				}
			}
			if bwrap != "" && (python == "" || spec.Interpreter != "") {
				out, err := sandbox.Run(ctx, bwrap, spec, sandbox.RunOptions{Timeout: 30 * time.Second})
				if err == nil && out.ExitCode != 0 {
					err = fmt.Errorf("python3 exited %d in the sandbox: %s", out.ExitCode, out.Stderr)
				}
				detail := interp
				if err == nil {
					detail += ": runs in the sandbox (" + strings.TrimSpace(string(out.Stdout)) + ")"
				}
				add("interpreter", err, detail)
			}
			pol, err := f.policy()
			if err == nil && pol == nil {
				err = errors.New("no trust policy: set PYLAYER_TRUST or pass --trust (a cosign public key or a policy file); pulls are refused without one")
			}
			add("trust", err, "policy "+f.trust)
			rep, err := c.Doctor(ctx, repair)
			res.Cache = doctorCache(rep)
			if err == nil && len(res.Cache.Bad) > 0 && !repair {
				err = fmt.Errorf("%d damaged trees or layers: run pylayer doctor --repair, then pull again", len(res.Cache.Bad))
			}
			add("cache", err, fmt.Sprintf("%d trees and layers checked, sound", res.Cache.Checked))
			var b strings.Builder
			failed := 0
			for _, ch := range res.Checks {
				mark := "ok  "
				if !ch.OK {
					mark = "FAIL"
					failed++
				}
				fmt.Fprintf(&b, "%s %-12s %s\n", mark, ch.Name, ch.Detail)
			}
			b.WriteString(doctorText(res.Cache.Checked, res.Cache.Bad, res.Cache.Repaired))
			if err := g.print(cmd.OutOrStdout(), res, b.String()); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d checks failed", failed, len(res.Checks))
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&repair, "repair", false, "remove damaged trees and layers so the next pull fetches them again")
	cmd.Flags().StringVar(&python, "python", "", "interpreter artifact to check in the sandbox")
	return cmd
}

func doctorText(checked int, bad, repaired []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cache: %d trees and layers checked, %d damaged", checked, len(bad))
	for _, s := range bad {
		b.WriteString("\n  damaged: " + s)
	}
	for _, s := range repaired {
		b.WriteString("\n  repaired: " + s)
	}
	return b.String()
}
