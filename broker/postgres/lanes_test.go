package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/postgres/pgtest"
)

// TestBackgroundLane: the server's background writes (leases, build claims) commit while
// a client's write is stuck, instead of waiting behind it in one queue; the client's
// write then commits too. The client's write is held by a row lock that another
// connection takes on its session, which the insert's foreign key check waits for.
func TestBackgroundLane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := open(t, pgtest.DSN(t))
	defer s.Close()
	at := time.Unix(1700000000, 0).UTC()
	for _, id := range []string{"s1", "s2"} {
		if err := s.CreateSession(ctx, broker.Session{ID: id, Owner: "o", Created: at}); err != nil {
			t.Fatal(err)
		}
	}
	req := func(id, session string, st broker.State) broker.Request {
		return broker.Request{ID: id, SessionID: session, Specs: []string{"foo==1.0"}, State: st, Created: at, Updated: at}
	}
	if err := s.CreateRequest(ctx, req("r2", "s2", broker.StateApproved)); err != nil {
		t.Fatal(err)
	}

	lock, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := lock.ExecContext(ctx, `SELECT 1 FROM sessions WHERE id = 's1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() { created <- s.CreateRequest(ctx, req("r1", "s1", broker.StatePending)) }()
	// Wait until the client's write waits for the lock (or, if it does not, ends).
	for waiting := 0; waiting == 0; {
		select {
		case err := <-created:
			t.Fatalf("the client's write ended (%v) while its session was locked", err)
		default:
		}
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			time.Sleep(time.Millisecond) // the next look; the condition decides, not the time
		}
	}

	// Without a lane of their own, these wait behind the stuck write until bctx ends.
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	defer bcancel()
	l := broker.Lease{Holder: "w1", TTL: time.Minute}
	if ok, err := s.AcquireLease(bctx, "sweep", l); err != nil || !ok {
		t.Fatalf("AcquireLease beside a stuck client write: %v, %v", ok, err)
	}
	claimed, ok, err := s.ClaimBuild(bctx, l)
	if err != nil || !ok || claimed.ID != "r2" {
		t.Fatalf("ClaimBuild beside a stuck client write: %q, %v, %v; want r2", claimed.ID, ok, err)
	}
	select {
	case err := <-created:
		t.Fatalf("the client's write ended (%v) before its session's lock was released", err)
	default:
	}

	if err := lock.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatalf("the client's write, after the lock: %v", err)
	}
	if r, err := s.GetRequest(ctx, "r1"); err != nil || r.State != broker.StatePending {
		t.Fatalf("r1 after the lock: %+v, %v", r, err)
	}
}
