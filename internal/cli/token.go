//go:build !lean

package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/stores"
)

func newTokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Work with broker tokens"}
	cmd.AddCommand(newTokenCreateCmd(g))
	return cmd
}

func newTokenCreateCmd(g *globals) *cobra.Command {
	var db, role, subject string
	cmd := &cobra.Command{
		Use: "create --db PATH --role admin|owner --subject NAME",
		Example: `  pylayer token create --db broker.db --role admin --subject root
  pylayer token create --db 'postgres://broker@db.internal/broker' --role owner --subject alice`,
		Short: "Mint a broker token (printed once; only its hash is stored)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if db == "" || subject == "" {
				return errors.New("--db and --subject are required")
			}
			if role != broker.RoleAdmin && role != broker.RoleOwner {
				return fmt.Errorf("--role %q: want admin or owner (agent tokens come with their session)", role)
			}
			store, err := stores.Open(cmd.Context(), db)
			if err != nil {
				return err
			}
			defer store.Close()
			secret, hash := broker.NewToken()
			if err := store.PutToken(cmd.Context(), broker.Token{Hash: hash, Role: role, Subject: subject, Created: time.Now().UTC()}); err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), map[string]string{"token": secret, "role": role, "subject": subject}, secret)
		},
	}
	cmd.Flags().StringVar(&db, "db", "", "the broker's database: an SQLite file or a postgres:// URL")
	cmd.Flags().StringVar(&role, "role", broker.RoleOwner, "admin (every session) or owner (their own sessions)")
	complete(cmd, "role", broker.RoleAdmin, broker.RoleOwner)
	cmd.Flags().StringVar(&subject, "subject", "", "the user the token acts as")
	return cmd
}
