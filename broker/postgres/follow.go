package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pylayer/pylayer/broker"
)

// channel is the NOTIFY channel on which every transaction that changes a request
// announces it (broker.ChangePayload: its ID, and its state unless terminal), delivered
// to the listeners when it commits.
const channel = "pylayer_requests"

// Reconnect backoff of the change feed.
const (
	followMinBackoff = 100 * time.Millisecond
	followMaxBackoff = 5 * time.Second
)

// Follow implements broker.ChangeFeed with LISTEN on a connection of its own (outside the
// pool: a listening connection must stay with its listener). When the connection fails it
// reconnects with backoff, and once it listens again calls changed("") for what it may
// have missed in between.
func (s *Store) Follow(ctx context.Context, changed func(broker.Change), status func(error)) error {
	if status == nil {
		status = func(error) {}
	}
	backoff := followMinBackoff
	for {
		err := s.listen(ctx, changed, status, func() { backoff = followMinBackoff })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		status(fmt.Errorf("%w; reconnecting in %s", err, backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, followMaxBackoff)
	}
}

// listen connects, listens and hands on notifications until the connection fails.
func (s *Store) listen(ctx context.Context, changed func(broker.Change), status func(error), listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return fmt.Errorf("connecting the change feed: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return fmt.Errorf("listening for changes: %w", err)
	}
	listening()
	status(nil)
	changed(broker.Change{}) // whatever changed before this connection listened
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("waiting for changes: %w", err)
		}
		changed(broker.ParseChangePayload(n.Payload))
	}
}
