package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/oci/sign"
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

func newDoctorCmd(g *globals) *cobra.Command {
	var repair bool
	cmd := &cobra.Command{
		Use:   "doctor [--repair]",
		Short: "Re-hash the host cache against its digests; report (and with --repair remove) damage",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.openCache()
			if err != nil {
				return err
			}
			r, err := c.Doctor(cmd.Context(), repair)
			if err != nil {
				return err
			}
			if err := g.print(cmd.OutOrStdout(), r, doctorText(r.Checked, r.Bad, r.Repaired)); err != nil {
				return err
			}
			if len(r.Bad) > 0 && !repair {
				return errors.New("the cache is damaged: run pylayer doctor --repair, then pull again")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "remove damaged trees and layers so the next pull fetches them again")
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
