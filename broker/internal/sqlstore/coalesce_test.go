package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

type kv struct{ k, v string }

// TestPointReadsCoalesce: reads that arrive while a batch runs wait and then go together
// in one query, each answered with its own row (or none); a key that cannot name a row is
// answered without a query.
func TestPointReadsCoalesce(t *testing.T) {
	dsn := "file:" + filepath.Join(t.TempDir(), "c.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), db, &Dialect{Prepare: true, ReadBatches: 1,
		InList:     `IN (SELECT value FROM json_each(?))`,
		ListArg:    func(keys []string) any { b, _ := json.Marshal(keys); return string(b) },
		Migrations: []string{`CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT NOT NULL)`}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 50
	for i := range n {
		if _, err := db.Exec(`INSERT INTO kv (k, v) VALUES (?, ?)`, fmt.Sprint("k", i), fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	var once sync.Once
	p := newPointReads(s.d, "kv", `SELECT k, v FROM kv WHERE k`, func(sc scanner) (kv, error) {
		var x kv
		err := sc.Scan(&x.k, &x.v)
		once.Do(func() { <-release }) // the first batch holds until the others queue
		return x, err
	}, func(x kv) string { return x.k })
	ctx := context.Background()
	got := make([]kv, n+1)
	found := make([]bool, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	read := func(i int, key string) {
		defer wg.Done()
		got[i], found[i], errs[i] = p.get(ctx, s, key)
	}
	wg.Add(1)
	go read(0, "k0")
	for {
		p.mu.Lock()
		running := p.running
		p.mu.Unlock()
		if running == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < n; i++ {
		wg.Add(1)
		go read(i, fmt.Sprint("k", i))
	}
	wg.Add(1)
	go read(n, "missing")
	for {
		p.mu.Lock()
		queued := len(p.queue)
		p.mu.Unlock()
		if queued == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !found[i] || got[i] != (kv{fmt.Sprint("k", i), fmt.Sprint("v", i)}) {
			t.Errorf("read %d: %+v, found %v, err %v", i, got[i], found[i], errs[i])
		}
	}
	if errs[n] != nil || found[n] {
		t.Errorf("missing key: found %v, err %v", found[n], errs[n])
	}
	if q := p.queries.Load(); q != 2 {
		t.Errorf("%d reads took %d queries, want 2 (one alone, then the %d that waited)", n+1, q, n)
	}
	if _, ok, err := p.get(ctx, s, "k\x00"); ok || err != nil || p.queries.Load() != 2 {
		t.Errorf("a key with NUL: found %v, err %v, queries %d; want nothing found without a query", ok, err, p.queries.Load())
	}

	// A caller that leaves stops waiting; the batch it was in answers the others.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := p.get(cctx, s, "k1"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: err %v, want context.Canceled", err)
	}
}
