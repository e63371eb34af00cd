// Command brokerload is the load generator of the broker benchmark (bench/broker.sh).
//
//	brokerload -write-wheels DIR
//	brokerload -serve-floor
//	brokerload -url URL[,URL...] -token OWNER_TOKEN [-floor URL] [-n 200] [-polls 3] [-specs foo==1.0,foo==2.0] [-label NAME] [-sync]
//
// With -write-wheels it writes the benchmark's index (pin 1.0 for the base, foo 1.0 and
// 2.0 for the requests) and exits. With -serve-floor it serves the floor, a trivial Go
// handler that answers the same calls with fixed bodies, and prints its URL. Otherwise it
// creates N sessions with the owner token, spread over the replicas -url names, then
// starts N agents at once, agent i on replica i mod len; each polls GET
// /v1/sessions/{id}/env POLLS times, POSTs a request for specs[i % len(specs)] (so most
// requests are identical and bind an existing layer without a build) and long-polls GET
// /v1/requests/{id}?wait=30s until it is terminal (through broker/client). An agent that
// long-polls anyway asks preferring an asynchronous answer (client.AskAsync, Prefer:
// respond-async), so the POST does not wait for the classification; -sync asks as a
// client that wants the decision in the POST's answer (client.Ask). With -floor the
// same burst runs against the floor first. It prints throughput, p50/p99/max latency per
// endpoint and the wall time, the p50/p99 ratios to the floor with the targets and
// a one-line summary, and exits non-zero unless every request ends bound. Loopback only;
// every loop is bounded.
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
	urls     []string // the broker's replicas; agent i talks to urls[i % len]
	floor    string   // the floor's URL, or ""
	token    string
	n, polls int
	specs    []string
	timeout  time.Duration
	label    string
	sync     bool      // Ask, not AskAsync
	cpu      cpuGroups // processes whose CPU time the burst reports
	profiles []string  // DEBUG_ADDR=FILE: CPU profiles to take across the agents' burst
}

func run(args []string) error {
	fs := flag.NewFlagSet("brokerload", flag.ContinueOnError)
	wheels := fs.String("write-wheels", "", "write the benchmark's wheels into this index directory and exit")
	floor := fs.Bool("serve-floor", false, "serve the floor (a trivial handler) on 127.0.0.1, print its URL and serve until SIGTERM")
	var c config
	urls := fs.String("url", "", "broker URL (http://127.0.0.1:PORT), or several replicas' URLs, comma-separated")
	fs.StringVar(&c.floor, "floor", "", "the floor's URL (brokerload -serve-floor): the same burst runs against it first")
	fs.StringVar(&c.token, "token", "", "owner token that creates the sessions")
	fs.StringVar(&c.label, "label", "broker", "what the run is called in the summary line")
	fs.IntVar(&c.n, "n", 200, "sessions, and agents at once")
	fs.IntVar(&c.polls, "polls", 3, "GET env calls per agent before its request")
	specs := fs.String("specs", "foo==1.0", "comma-separated requirements; agent i asks for the (i mod len)-th")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.BoolVar(&c.sync, "sync", false, "ask without Prefer: respond-async (the POST answers with the decision)")
	cpu := fs.String("cpu", "", "report the CPU time of these processes (and their children) during the agents' burst: NAME=PID[+PID...],...")
	floorCPU := fs.String("floor-cpu", "", "the same for the floor's burst")
	profiles := fs.String("profile", "", "take a CPU profile of each replica across the agents' burst (not the sessions' setup): HOST:PORT=FILE,... of their --debug-addr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *wheels != "" {
		return writeWheels(*wheels)
	}
	if *floor {
		return serveFloor()
	}
	c.specs = strings.Split(*specs, ",")
	var err error
	if c.cpu, err = parseCPUGroups(*cpu); err != nil {
		return err
	}
	fcpu, err := parseCPUGroups(*floorCPU)
	if err != nil {
		return err
	}
	if *profiles != "" {
		c.profiles = strings.Split(*profiles, ",")
	}
	if c.n < 1 || c.n > 10000 || c.polls < 0 || c.polls > 100 {
		return errors.New("-n must be 1..10000 and -polls 0..100")
	}
	c.urls = strings.Split(*urls, ",")
	for _, s := range append(append([]string(nil), c.urls...), c.floor) {
		if s == "" && s == c.floor {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "http" || !loopback(u.Hostname()) {
			return fmt.Errorf("%q: want http://127.0.0.1:PORT (loopback only)", s)
		}
	}
	if c.token == "" {
		return errors.New("-token is required (pylayer token create --role owner)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var fl *result
	if c.floor != "" {
		fc := c
		fc.urls, fc.token, fc.cpu, fc.profiles = []string{c.floor}, "floor", fcpu, nil
		r, err := burst(ctx, fc)
		if err != nil {
			return fmt.Errorf("the floor: %w", err)
		}
		fl = &r
	}
	r, err := burst(ctx, c)
	report(c, r, fl)
	return err
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

// result is one burst's measurements.
type result struct {
	setup, wall time.Duration
	toBound     []time.Duration
	cpu         string // CPU time of the -cpu processes and brokerload during the agents' burst
	lat         map[string][]time.Duration
	bound       int
}

// The endpoints the summary compares with the floor.
const (
	epEnv = "GET /v1/sessions/{id}/env"
	epAsk = "POST /v1/sessions/{id}/requests"
)

// burst creates cfg.n sessions (16 at a time, spread over the replicas), then runs cfg.n
// agents at once, agent i against replica i mod len(cfg.urls).
func burst(ctx context.Context, cfg config) (result, error) {
	tr := &http.Transport{MaxIdleConns: cfg.n + 16, MaxIdleConnsPerHost: cfg.n + 16, Proxy: nil}
	defer tr.CloseIdleConnections()
	lat := &latencies{lat: map[string][]time.Duration{}}
	owners := make([]*client.Client, len(cfg.urls))
	for i, u := range cfg.urls {
		var err error
		owners[i], err = client.New(u, cfg.token, client.WithHTTPClient(&http.Client{Transport: tr}), client.WithObserver(lat.observe))
		if err != nil {
			return result{}, err
		}
	}

	// Sessions (setup; reported but not part of the agents' wall time).
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
			owner := owners[i%len(owners)]
			cs, err := owner.CreateSession(ctx, client.NewSession{})
			ids[i], sessions[i], errs[i] = cs.Session.ID, owner.WithToken(cs.AgentToken), err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return result{}, fmt.Errorf("creating sessions: %w", err)
	}
	res := result{setup: time.Since(setup), toBound: make([]time.Duration, cfg.n)}

	// Agents, all at once.
	final := make([]broker.Request, cfg.n)
	gate := make(chan struct{})
	for i, agentClient := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			t0 := time.Now()
			final[i], errs[i] = agent(ctx, agentClient, cfg, i, ids[i])
			res.toBound[i] = time.Since(t0)
		}()
	}
	stopProfiles, err := startProfiles(ctx, cfg.profiles)
	if err != nil {
		return result{}, err
	}
	cpu0 := cfg.cpu.sample()
	start := time.Now()
	close(gate)
	wg.Wait()
	res.wall = time.Since(start)
	res.cpu = cfg.cpu.report(cpu0, cfg.cpu.sample())
	if err := stopProfiles(); err != nil {
		return res, err
	}
	res.lat = lat.lat

	var failures []string
	for i, r := range final {
		switch {
		case errs[i] != nil:
			failures = append(failures, errs[i].Error())
		case r.State == broker.StateBound:
			res.bound++
		default:
			failures = append(failures, fmt.Sprintf("request %s ended %s %s", r.ID, r.State, r.Error))
		}
	}
	if len(failures) > 0 {
		if len(failures) > 5 {
			failures = append(failures[:5], fmt.Sprintf("... and %d more", len(failures)-5))
		}
		return res, fmt.Errorf("%d of %d agents did not end bound:\n  %s", cfg.n-res.bound, cfg.n, strings.Join(failures, "\n  "))
	}
	return res, nil
}

// report prints r, and its ratios to the floor fl when there is one. The last line,
// "summary LABEL ...", is one line per run for the script's table.
func report(cfg config, r result, fl *result) {
	calls := 0
	for ep, l := range r.lat {
		if ep != "POST /v1/sessions" {
			calls += len(l)
		}
	}
	fmt.Printf("broker load (%s): %d sessions (setup %s), %d agents at once over %d replica(s), %d env polls each, specs %s\n",
		cfg.label, cfg.n, r.setup.Round(time.Millisecond), cfg.n, len(cfg.urls), cfg.polls, strings.Join(cfg.specs, ","))
	fmt.Printf("agents' wall time           %s\n", r.wall.Round(time.Millisecond))
	fmt.Printf("CPU during the agents       %s\n", r.cpu)
	if fl != nil {
		fmt.Printf("the floor's: wall %s, CPU %s\n", fl.wall.Round(time.Millisecond), fl.cpu)
	}
	fmt.Printf("agent HTTP calls            %d (%.0f requests/s)\n", calls, float64(calls)/r.wall.Seconds())
	fmt.Printf("package requests bound      %d of %d (%.1f bound/s)\n", r.bound, cfg.n, float64(r.bound)/r.wall.Seconds())
	fmt.Printf("request-to-bound per agent  p50 %s  p99 %s  max %s\n", pct(r.toBound, 50), pct(r.toBound, 99), pct(r.toBound, 100))
	fmt.Printf("%-36s %6s %10s %10s %10s\n", "endpoint", "calls", "p50", "p99", "max")
	var eps []string
	for ep := range r.lat {
		eps = append(eps, ep)
	}
	sort.Strings(eps)
	for _, ep := range eps {
		l := r.lat[ep]
		fmt.Printf("%-36s %6d %10s %10s %10s\n", ep, len(l), pct(l, 50), pct(l, 99), pct(l, 100))
	}
	if fl == nil {
		return
	}
	rows := []struct {
		name   string
		b, f   []time.Duration
		target float64
	}{
		{"GET env", r.lat[epEnv], fl.lat[epEnv], 2},
		{"POST requests", r.lat[epAsk], fl.lat[epAsk], 3},
		{"request-to-bound", r.toBound, fl.toBound, 5},
	}
	fmt.Printf("%-18s %10s %10s %10s %10s %8s %8s %7s\n", "vs floor", "p50", "floor p50", "p99", "floor p99", "p50 x", "p99 x", "target")
	sum := "summary " + cfg.label
	for _, row := range rows {
		p99x := ratio(row.b, row.f, 99)
		verdict := "ok"
		if p99x > row.target {
			verdict = "MISSED"
		}
		fmt.Printf("%-18s %10s %10s %10s %10s %8.2f %8.2f %4.0fx %s\n", row.name, pct(row.b, 50), pct(row.f, 50), pct(row.b, 99), pct(row.f, 99),
			ratio(row.b, row.f, 50), p99x, row.target, verdict)
		sum += fmt.Sprintf(" | %s p50 %s p99 %s (%.2fx floor %s)", row.name, pct(row.b, 50), pct(row.b, 99), p99x, pct(row.f, 99))
	}
	fmt.Println(sum)
}

// ratio is the p-th percentile of b over that of f.
func ratio(b, f []time.Duration, p int) float64 {
	fb, ff := quantile(b, p), quantile(f, p)
	if ff <= 0 {
		return 0
	}
	return float64(fb) / float64(ff)
}

// agent is one agent's life: look at the env, ask, wait until bound (at most 20 long polls).
func agent(ctx context.Context, c *client.Client, cfg config, i int, session string) (broker.Request, error) {
	for range cfg.polls {
		if _, err := c.Env(ctx, session); err != nil {
			return broker.Request{}, err
		}
	}
	ask := c.AskAsync
	if cfg.sync {
		ask = c.Ask
	}
	r, err := ask(ctx, session, cfg.specs[i%len(cfg.specs)])
	for try := 0; err == nil && try < 20 && !broker.Terminal(r.State); try++ {
		r, err = c.Poll(ctx, r.ID, 30*time.Second)
	}
	return r, err
}

// quantile is the p-th percentile (nearest rank) of l, 0 for none.
func quantile(l []time.Duration, p int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	k := max((p*len(s)+99)/100, 1)
	return s[k-1]
}

// pct is the p-th percentile (nearest rank) of l, rounded for printing.
func pct(l []time.Duration, p int) string {
	if len(l) == 0 {
		return "-"
	}
	d := quantile(l, p)
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
