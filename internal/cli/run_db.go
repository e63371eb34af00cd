//go:build !lean

package cli

import (
	"fmt"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/stores"
	"github.com/spf13/cobra"
)

// sessionFromDB reads a session and its bindings from the broker's store.
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
