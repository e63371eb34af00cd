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
// terminal. It prints throughput, p50/p99/max latency per endpoint and the wall time, and
// exits non-zero unless every request ends bound. Loopback only; every loop is bounded.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

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

// client records the latency of every call by endpoint.
type client struct {
	base string
	hc   *http.Client

	mu  sync.Mutex
	lat map[string][]time.Duration
	n   int
}

func (c *client) call(ctx context.Context, endpoint, method, path, token string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, endpoint, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	d := time.Since(start)
	c.mu.Lock()
	c.lat[endpoint] = append(c.lat[endpoint], d)
	c.n++
	c.mu.Unlock()
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, endpoint, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w", method, endpoint, err)
		}
	}
	return resp.StatusCode, nil
}

type session struct {
	ID    string
	Agent string
}

type request struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Error string `json:"error"`
}

func terminal(s string) bool {
	return s == "bound" || s == "denied" || s == "rejected" || s == "failed"
}

func bench(ctx context.Context, cfg config) error {
	tr := &http.Transport{MaxIdleConns: cfg.n + 16, MaxIdleConnsPerHost: cfg.n + 16, Proxy: nil}
	defer tr.CloseIdleConnections()
	c := &client{base: strings.TrimSuffix(cfg.url, "/"), hc: &http.Client{Transport: tr}, lat: map[string][]time.Duration{}}

	// Sessions, 16 at a time (setup; reported but not part of the agents' wall time).
	sessions := make([]session, cfg.n)
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
			var cs struct {
				Session    struct{ ID string }
				AgentToken string `json:"agent_token"`
			}
			_, errs[i] = c.call(ctx, "POST /v1/sessions", "POST", "/v1/sessions", cfg.token, nil, &cs)
			sessions[i] = session{ID: cs.Session.ID, Agent: cs.AgentToken}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("creating sessions: %w", err)
	}
	setupWall := time.Since(setup)

	// Agents, all at once.
	toBound := make([]time.Duration, cfg.n)
	final := make([]request, cfg.n)
	gate := make(chan struct{})
	for i, se := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			t0 := time.Now()
			errs[i] = agent(ctx, c, cfg, i, se, &final[i])
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
		case r.State == "bound":
			bound++
		default:
			failures = append(failures, fmt.Sprintf("request %s ended %s %s", r.ID, r.State, r.Error))
		}
	}
	calls := 0
	for ep, l := range c.lat {
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
	for ep := range c.lat {
		eps = append(eps, ep)
	}
	sort.Strings(eps)
	for _, ep := range eps {
		l := c.lat[ep]
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

// agent is one agent's life: look at the env, ask, wait until bound.
func agent(ctx context.Context, c *client, cfg config, i int, se session, out *request) error {
	for range cfg.polls {
		if _, err := c.call(ctx, "GET /v1/sessions/{id}/env", "GET", "/v1/sessions/"+se.ID+"/env", se.Agent, nil, nil); err != nil {
			return err
		}
	}
	spec := cfg.specs[i%len(cfg.specs)]
	var r request
	if _, err := c.call(ctx, "POST /v1/sessions/{id}/requests", "POST", "/v1/sessions/"+se.ID+"/requests", se.Agent,
		map[string]any{"packages": []string{spec}}, &r); err != nil {
		return err
	}
	for try := 0; try < 20 && !terminal(r.State); try++ {
		if _, err := c.call(ctx, "GET /v1/requests/{id}?wait=30s", "GET", "/v1/requests/"+r.ID+"?wait=30s", se.Agent, nil, &r); err != nil {
			return err
		}
	}
	*out = r
	return nil
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
