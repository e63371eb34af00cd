// Command brokerload is the load generator of the broker benchmark (bench/broker.sh).
//
//	brokerload -write-wheels DIR
//	brokerload -url http://127.0.0.1:PORT -token OWNER_TOKEN [-n 200] [-polls 3] [-specs foo==1.0,foo==2.0]
//
// With -write-wheels it writes the benchmark's index (pin 1.0 for the base, foo 1.0 and
// 2.0 for the requests) and exits. Otherwise it creates N sessions with the owner token,
// then starts N agents at once; each polls GET /v1/sessions/{id}/env POLLS times, POSTs a
// request for specs[i % len(specs)] (so most requests are identical and bind an existing
// layer without a build) and long-polls GET /v1/requests/{id}?wait=30s until it is
// terminal (through broker/client). It prints throughput, p50/p99/max latency per endpoint and the wall time, and
// exits non-zero unless every request ends bound. Loopback only; every loop is bounded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/test/fixture"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "brokerload:", err)
		os.Exit(1)
	}
}

type config struct {
	url, token string
	n, polls   int
	specs      []string
	timeout    time.Duration
}

func run(args []string) error {
	fs := flag.NewFlagSet("brokerload", flag.ContinueOnError)
	wheels := fs.String("write-wheels", "", "write the benchmark's wheels into this index directory and exit")
	var c config
	fs.StringVar(&c.url, "url", "", "broker URL (http://127.0.0.1:PORT)")
	fs.StringVar(&c.token, "token", "", "owner token that creates the sessions")
	fs.IntVar(&c.n, "n", 200, "sessions, and agents at once")
	fs.IntVar(&c.polls, "polls", 3, "GET env calls per agent before its request")
	specs := fs.String("specs", "foo==1.0", "comma-separated requirements; agent i asks for the (i mod len)-th")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *wheels != "" {
		return writeWheels(*wheels)
	}
	c.specs = strings.Split(*specs, ",")
	if c.n < 1 || c.n > 10000 || c.polls < 0 || c.polls > 100 {
		return errors.New("-n must be 1..10000 and -polls 0..100")
	}
	u, err := url.Parse(c.url)
	if err != nil || u.Scheme != "http" || !loopback(u.Hostname()) {
		return fmt.Errorf("-url %q: want http://127.0.0.1:PORT (loopback only)", c.url)
	}
	if c.token == "" {
		return errors.New("-token is required (pylayer token create --role owner)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	return bench(ctx, c)
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func writeWheels(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, w := range []fixture.Wheel{{Name: "pin", Version: "1.0"}, {Name: "foo", Version: "1.0"}, {Name: "foo", Version: "2.0"}} {
		if _, err := w.Write(dir); err != nil {
			return err
		}
	}
	return nil
}

// latencies records the latency of every call by endpoint (the client's observer).
type latencies struct {
	mu  sync.Mutex
	lat map[string][]time.Duration
}

func (l *latencies) observe(c client.Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lat[c.Endpoint] = append(l.lat[c.Endpoint], c.Duration)
}

func bench(ctx context.Context, cfg config) error {
	tr := &http.Transport{MaxIdleConns: cfg.n + 16, MaxIdleConnsPerHost: cfg.n + 16, Proxy: nil}
	defer tr.CloseIdleConnections()
	lat := &latencies{lat: map[string][]time.Duration{}}
	owner, err := client.New(cfg.url, cfg.token, client.WithHTTPClient(&http.Client{Transport: tr}), client.WithObserver(lat.observe))
	if err != nil {
		return err
	}

	// Sessions, 16 at a time (setup; reported but not part of the agents' wall time).
	sessions := make([]*client.Client, cfg.n)
	ids := make([]string, cfg.n)
	errs := make([]error, cfg.n)
	setup := time.Now()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cs, err := owner.CreateSession(ctx, client.NewSession{})
			ids[i], sessions[i], errs[i] = cs.Session.ID, owner.WithToken(cs.AgentToken), err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("creating sessions: %w", err)
	}
	setupWall := time.Since(setup)

	// Agents, all at once.
	toBound := make([]time.Duration, cfg.n)
	final := make([]broker.Request, cfg.n)
	gate := make(chan struct{})
	for i, agentClient := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			t0 := time.Now()
			final[i], errs[i] = agent(ctx, agentClient, cfg, i, ids[i])
			toBound[i] = time.Since(t0)
		}()
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	wall := time.Since(start)

	bound := 0
	var failures []string
	for i, r := range final {
		switch {
		case errs[i] != nil:
			failures = append(failures, errs[i].Error())
		case r.State == broker.StateBound:
			bound++
		default:
			failures = append(failures, fmt.Sprintf("request %s ended %s %s", r.ID, r.State, r.Error))
		}
	}
	calls := 0
	for ep, l := range lat.lat {
		if ep != "POST /v1/sessions" {
			calls += len(l)
		}
	}
	fmt.Printf("broker load: %d sessions (setup %s), %d agents at once, %d env polls each, specs %s\n",
		cfg.n, setupWall.Round(time.Millisecond), cfg.n, cfg.polls, strings.Join(cfg.specs, ","))
	fmt.Printf("agents' wall time           %s\n", wall.Round(time.Millisecond))
	fmt.Printf("agent HTTP calls            %d (%.0f requests/s)\n", calls, float64(calls)/wall.Seconds())
	fmt.Printf("package requests bound      %d of %d (%.1f bound/s)\n", bound, cfg.n, float64(bound)/wall.Seconds())
	fmt.Printf("request-to-bound per agent  p50 %s  p99 %s  max %s\n", pct(toBound, 50), pct(toBound, 99), pct(toBound, 100))
	fmt.Printf("%-36s %6s %10s %10s %10s\n", "endpoint", "calls", "p50", "p99", "max")
	var eps []string
	for ep := range lat.lat {
		eps = append(eps, ep)
	}
	sort.Strings(eps)
	for _, ep := range eps {
		l := lat.lat[ep]
		fmt.Printf("%-36s %6d %10s %10s %10s\n", ep, len(l), pct(l, 50), pct(l, 99), pct(l, 100))
	}
	if len(failures) > 0 {
		if len(failures) > 5 {
			failures = append(failures[:5], fmt.Sprintf("... and %d more", len(failures)-5))
		}
		return fmt.Errorf("%d of %d agents did not end bound:\n  %s", cfg.n-bound, cfg.n, strings.Join(failures, "\n  "))
	}
	return nil
}

// agent is one agent's life: look at the env, ask, wait until bound (at most 20 long polls).
func agent(ctx context.Context, c *client.Client, cfg config, i int, session string) (broker.Request, error) {
	for range cfg.polls {
		if _, err := c.Env(ctx, session); err != nil {
			return broker.Request{}, err
		}
	}
	r, err := c.Ask(ctx, session, cfg.specs[i%len(cfg.specs)])
	for try := 0; err == nil && try < 20 && !broker.Terminal(r.State); try++ {
		r, err = c.Poll(ctx, r.ID, 30*time.Second)
	}
	return r, err
}

// pct is the p-th percentile (nearest rank) of l, rounded for printing.
func pct(l []time.Duration, p int) string {
	if len(l) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), l...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	k := (p*len(s) + 99) / 100
	k = max(k, 1)
	d := s[k-1]
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
