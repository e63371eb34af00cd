package broker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

func TestChangePayload(t *testing.T) {
	for _, tc := range []struct {
		st   broker.State
		want string
		open bool
	}{
		{broker.StateBuilding, "req_1 building", true},
		{broker.StateApproved, "req_1 approved", true},
		{broker.StatePending, "req_1 pending", true},
		{broker.StateBound, "req_1", false},
		{broker.StateFailed, "req_1", false},
		{"", "req_1", false},
	} {
		p := broker.ChangePayload("req_1", tc.st)
		if p != tc.want {
			t.Errorf("ChangePayload(req_1, %q) = %q, want %q", tc.st, p, tc.want)
		}
		if c := broker.ParseChangePayload(p); c.RequestID != "req_1" || c.Open != tc.open {
			t.Errorf("ParseChangePayload(%q) = %+v, want req_1 open=%v", p, c, tc.open)
		}
	}
	// What an older replica or a hand-made NOTIFY sends: the ID alone, or junk after it.
	for _, p := range []string{"req_1", "req_1 sideways", "req_1 bound"} {
		if c := broker.ParseChangePayload(p); c.RequestID != "req_1" || c.Open {
			t.Errorf("ParseChangePayload(%q) = %+v, want req_1, not open (a long poll reads it)", p, c)
		}
	}
}

// pushFeed is a store whose change feed announces what the test sends, and which counts
// the reads of requests.
type pushFeed struct {
	broker.Store
	changes chan broker.Change
	mu      sync.Mutex
	reads   int
}

func (f *pushFeed) Follow(ctx context.Context, changed func(broker.Change), status func(error)) error {
	status(nil)
	for {
		select {
		case c := <-f.changes:
			changed(c)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// GetRequest counts a read once it has returned, so a count the test sees is of reads
// whose answer is settled: one counted before a change cannot have seen it.
func (f *pushFeed) GetRequest(ctx context.Context, id string) (broker.Request, error) {
	r, err := f.Store.GetRequest(ctx, id)
	f.mu.Lock()
	f.reads++
	f.mu.Unlock()
	return r, err
}

func (f *pushFeed) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// TestFeedWakesLongPollsOnEndsOnly: a change another replica announces that leaves the
// request open (claimed, building) does not make a long poll read it again; one that may
// have ended it does, and the poll answers. The poll reads its request once before it
// waits: its check of access is that read.
func TestFeedWakesLongPollsOnEndsOnly(t *testing.T) {
	f := &pushFeed{changes: make(chan broker.Change)}
	e := newEnv(t, func(o *broker.Options) { f.Store = o.Store; o.Store = f; o.Recheck = time.Hour })
	addr := e.serve(t)
	r := e.request(e.agentA, e.sesA, `"foo==1.0"`)
	start := f.count()
	polled := make(chan broker.Request, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/requests/"+r.ID+"?wait=60s", nil)
		req.Header.Set("Authorization", "Bearer "+e.agentA)
		var got broker.Request
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			defer resp.Body.Close()
			json.NewDecoder(resp.Body).Decode(&got) //nolint:errcheck // a zero answer fails below
		}
		polled <- got
	}()
	// In place, and its first read done: a read still under way when the request is bound
	// would answer bound by itself, and no change would need to wake it.
	waitFor(t, "the long poll in place", func() bool { return broker.Watched(e.srv) > 0 && f.count() > start })
	before := f.count()
	f.changes <- broker.Change{RequestID: r.ID, Open: true}                // claimed by another replica
	f.changes <- broker.Change{RequestID: "req_someone_else", Open: false} // another request ended
	f.changes <- broker.Change{RequestID: r.ID, Open: true}                // building
	if err := e.store.UpdateRequest(context.Background(), r.ID, func(q *broker.Request) error {
		q.State, q.Digest = broker.StateBound, "sha256:0b"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.changes <- broker.Change{RequestID: r.ID} // bound
	got := <-polled
	if got.State != broker.StateBound {
		t.Fatalf("long poll answered %s, want bound", got.State)
	}
	if n := f.count() - before; n != 1 {
		t.Errorf("the long poll read its request %d times after it waited, want 1 (on the change that ended it)", n)
	}
	if n := f.count() - start; n != 2 { // registered before its first read, which serves both
		t.Errorf("the long poll read its request %d times in all, want 2 (once before it waits, once at the end)", n)
	}
}

// endedBuilder counts the ends the server passes on (broker.Ended).
type endedBuilder struct{ ended chan struct{} }

func (b *endedBuilder) Enqueue(context.Context, string) {}
func (b *endedBuilder) RequestEnded()                   { b.ended <- struct{}{} }

// TestFeedTellsBuilderOfEnds: a change another replica announces that may have ended a
// request (or one of no request: anything may have) reaches the builder, which waits on
// that replica's layer lease; one that left a request open does not.
func TestFeedTellsBuilderOfEnds(t *testing.T) {
	f := &pushFeed{changes: make(chan broker.Change)}
	b := &endedBuilder{ended: make(chan struct{}, 8)}
	e := newEnv(t, func(o *broker.Options) { f.Store = o.Store; o.Store = f; o.Builder = b })
	e.serve(t)
	for _, c := range []broker.Change{{RequestID: "req_1", Open: true}, {RequestID: "req_1"}, {RequestID: "req_2", Open: true}, {}} {
		f.changes <- c // unbuffered: taken by Follow, whose callback runs before it takes the next
	}
	f.changes <- broker.Change{RequestID: "req_3", Open: true} // the callback of {} has returned
	if n := len(b.ended); n != 2 {
		t.Errorf("the builder was told of %d ends, want 2 (a bound request, and a change of no request)", n)
	}
}
