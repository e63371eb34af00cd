package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/postgres"
	"github.com/pylayer/pylayer/broker/postgres/pgtest"
)

// pendingClassifier classifies every request pending; these tests never classify.
type pendingClassifier struct{}

func (pendingClassifier) Classify(context.Context, broker.Session, []string, *broker.Upload) (broker.Request, error) {
	return broker.Request{State: broker.StatePending}, nil
}

// replica is one broker.Server serving over its own connection pool to the database.
type replica struct {
	store *postgres.Store
	srv   *broker.Server
	url   string
}

func startReplica(t *testing.T, dsn string) *replica {
	t.Helper()
	st := open(t, dsn)
	// Recheck far past the poll's wait: a long poll that ends early was woken.
	srv, err := broker.NewServer(broker.Options{Store: st, Classifier: pendingClassifier{}, Recheck: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		st.Close()
	})
	return &replica{store: st, srv: srv, url: "http://" + ln.Addr().String()}
}

// metric reads one unlabelled metric of the replica.
func (r *replica) metric(t *testing.T, name string) int64 {
	t.Helper()
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		var v int64
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

// waitMetric waits until the metric has the value (bounded: 15 s, against waits of 60 s).
func (r *replica) waitMetric(t *testing.T, name string, want int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for r.metric(t, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s is %d, want %d", name, r.url, r.metric(t, name), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type pollResult struct {
	state broker.State
	err   error
}

// poll long-polls request id on r for up to 60 s.
func (r *replica) poll(token, id string) <-chan pollResult {
	out := make(chan pollResult, 1)
	go func() {
		req, _ := http.NewRequest("GET", r.url+"/v1/requests/"+id+"?wait=60s", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- pollResult{err: err}
			return
		}
		defer resp.Body.Close()
		var q broker.Request
		err = json.NewDecoder(resp.Body).Decode(&q)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		out <- pollResult{state: q.State, err: err}
	}()
	return out
}

// TestLongPollAcrossReplicas: a long poll on replica 1 ends as soon as replica 2 binds
// its request, through LISTEN/NOTIFY (the poll's recheck is an hour), also after replica
// 1's listening connection was killed and the feed reconnected.
func TestLongPollAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	r1, r2 := startReplica(t, dsn), startReplica(t, dsn)
	r1.waitMetric(t, "pylayer_change_feed_listening", 1)
	r2.waitMetric(t, "pylayer_change_feed_listening", 1)
	secret, hash := broker.NewToken()
	if err := r1.store.PutToken(ctx, broker.Token{Hash: hash, Role: broker.RoleAdmin, Subject: "root"}); err != nil {
		t.Fatal(err)
	}
	if err := r1.store.CreateSession(ctx, broker.Session{ID: "s1", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}

	for round, disrupt := range []bool{false, true} {
		if disrupt {
			// Kill r1's (and r2's) listening connections: the feeds reconnect.
			if _, err := r2.store.DB().ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND query LIKE 'LISTEN%'`); err != nil {
				t.Fatal(err)
			}
			r1.waitMetric(t, "pylayer_change_feed_listening", 1)
		}
		id := fmt.Sprintf("r%d", round)
		now := time.Now().UTC()
		if err := r1.store.CreateRequest(ctx, broker.Request{ID: id, SessionID: "s1", State: broker.StateApproved, Created: now, Updated: now}); err != nil {
			t.Fatal(err)
		}
		lease := broker.Lease{Holder: "replica-2", TTL: time.Minute}
		if _, ok, err := r2.store.ClaimBuild(ctx, lease); err != nil || !ok {
			t.Fatalf("claim on replica 2: %v %v", ok, err)
		}
		res := r1.poll(secret, id)
		r1.waitMetric(t, "pylayer_long_polls_waiting", 1)
		before := r1.metric(t, "pylayer_change_feed_notifications_total")
		bound := time.Now()
		b := broker.Binding{SessionID: "s1", Kind: broker.KindExt, Digest: "sha256:0b", Ref: "r@sha256:0b", RequestID: id, Created: now}
		if err := r2.store.BindBuild(ctx, lease, b, "k", broker.AuditEvent{Actor: "builder", Action: "bound", SessionID: "s1", RequestID: id}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-res:
			if got.err != nil || got.state != broker.StateBound {
				t.Fatalf("round %d: the poll on replica 1 answered %q (%v), want bound", round, got.state, got.err)
			}
			t.Logf("round %d: the poll on replica 1 ended %s after replica 2 bound", round, time.Since(bound))
		case <-time.After(15 * time.Second): // the poll's own wait is 60 s, its recheck 1 h
			t.Fatalf("round %d: the poll on replica 1 still waits 15 s after replica 2 bound", round)
		}
		if after := r1.metric(t, "pylayer_change_feed_notifications_total"); after <= before {
			t.Errorf("round %d: replica 1 counted no notification (%d, then %d)", round, before, after)
		}
	}
}
