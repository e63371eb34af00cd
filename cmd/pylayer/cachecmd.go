package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/sandbox"
)

func newKeygenCmd(g *globals) *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Make a cosign key pair (PREFIX.key encrypted with $COSIGN_PASSWORD, PREFIX.pub)",
		Long: `Make a cosign-compatible ECDSA P-256 key pair, the same format as cosign generate-key-pair:
the private key is encrypted with the password in COSIGN_PASSWORD. Existing files are never
overwritten.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pw, ok := os.LookupEnv(sign.PasswordEnv)
			if !ok {
				return fmt.Errorf("set %s to the password that encrypts the private key (it may be empty, but must be set)", sign.PasswordEnv)
			}
			priv, pub, err := sign.GenerateKeyPair([]byte(pw))
			if err != nil {
				return err
			}
			kf, pf := prefix+".key", prefix+".pub"
			for _, p := range []string{kf, pf} {
				if _, err := os.Stat(p); err == nil {
					return fmt.Errorf("%s exists; not overwriting a key", p)
				}
			}
			if err := writeNew(kf, priv, 0o600); err != nil {
				return err
			}
			if err := writeNew(pf, pub, 0o644); err != nil {
				os.Remove(kf)
				return err
			}
			return g.print(cmd.OutOrStdout(), map[string]string{"private_key": kf, "public_key": pf}, pf)
		},
	}
	cmd.Flags().StringVar(&prefix, "output-key-prefix", "cosign", "file name prefix of the key pair")
	return cmd
}

func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

func newLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the layers in the host cache: sizes, refs, and whether a sandbox holds them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.openCache()
			if err != nil {
				return err
			}
			es, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return g.print(cmd.OutOrStdout(), es, "")
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "DIGEST\tSIZE\tWHEELS\tHELD\tREFS")
			for _, e := range es {
				held := ""
				if e.Held {
					held = "held"
				}
				refs := strings.Join(e.Refs, " ")
				if e.Problem != "" {
					refs = "PROBLEM: " + e.Problem
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", short(e.Digest.String()), human(e.Bytes), len(e.Trees), held, refs)
			}
			return w.Flush()
		},
	}
}

func newGCCmd(g *globals) *cobra.Command {
	var maxBytes int64
	cmd := &cobra.Command{
		Use:   "gc [--max-bytes N]",
		Short: "Remove cached layers no ref and no running sandbox holds (oldest first, down to --max-bytes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.openCache()
			if err != nil {
				return err
			}
			r, err := c.GC(cmd.Context(), maxBytes, nil)
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), r, fmt.Sprintf("removed %d layers and %d trees, freed %s; %d layers kept", len(r.RemovedLayers), len(r.RemovedTrees), human(r.FreedBytes), len(r.Kept)))
		},
	}
	cmd.Flags().Int64Var(&maxBytes, "max-bytes", -1, "keep unreferenced layers while the cache is under this size (-1: remove every unreferenced layer)")
	return cmd
}

type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type doctorResult struct {
	Checks []check            `json:"checks"`
	Cache  cache.DoctorReport `json:"cache"`
}

func newDoctorCmd(g *globals) *cobra.Command {
	var repair bool
	var python string
	f := &regFlags{}
	cmd := &cobra.Command{
		Use:   "doctor [--repair] [--python REF]",
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
				m, err := ensureLayer(cmd, f, c, python)
				if err != nil {
					add("interpreter", err, "")
				} else {
					defer m.release()
					spec.Interpreter = m.root
					interp = "interpreter artifact " + m.digest.String()
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
			res.Cache, err = c.Doctor(ctx, repair)
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
