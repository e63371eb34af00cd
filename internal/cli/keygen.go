//go:build !lean

package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/spf13/cobra"
)

func newKeygenCmd(g *globals) *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:     "keygen",
		Example: `  COSIGN_PASSWORD=... pylayer keygen --output-key-prefix ci   # writes ci.key and ci.pub`,
		Short:   "Make a cosign key pair (PREFIX.key encrypted with $COSIGN_PASSWORD, PREFIX.pub)",
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
			if err := writeNew(cmd.Context(), kf, priv, 0o600); err != nil {
				return err
			}
			if err := writeNew(cmd.Context(), pf, pub, 0o644); err != nil {
				os.Remove(kf)
				return err
			}
			return g.print(cmd.OutOrStdout(), map[string]string{"private_key": kf, "public_key": pf}, pf)
		},
	}
	cmd.Flags().StringVar(&prefix, "output-key-prefix", "cosign", "file name prefix of the key pair")
	return cmd
}

// writeNew creates path with b, never replacing a file (a key) that exists.
func writeNew(ctx context.Context, path string, b []byte, mode os.FileMode) error {
	created, err := fsx.CreateFile(ctx, path, b, mode)
	if err == nil && !created {
		err = fmt.Errorf("%s exists; not overwriting a key", path)
	}
	return err
}
