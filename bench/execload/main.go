// Command execload is the load side of the warm-session benchmark (bench/exec.sh).
//
//	execload -url URL -token OWNER_TOKEN -db DB -repo REPO [-n 200] [-runs 20] [-pylayer bin/pylayer]
//
// It creates one session with the owner token, then, with the session's agent token:
// exec `pass` once (the process starts), N times more (the warm round trip, timed at the
// client: HTTP, the executor, the sandboxed process and back); exec `import docx,
// openpyxl` once, then N times more (after the first call the modules are loaded); and,
// as the peer in the same run, `pylayer run --session ID --db DB` of the same two cells
// RUNS times each (a new bwrap and interpreter per call). It prints p50 and p99 of each and
// the ratios, with the target: a warm exec of pass at p50 <= 5 ms.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "execload:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("url", "", "the broker (pylayer serve) URL")
	token := flag.String("token", "", "owner token that creates the session")
	db := flag.String("db", "", "the broker's --db, for the pylayer run --session peer")
	repo := flag.String("repo", "", "the repository, for the pylayer run --session peer")
	n := flag.Int("n", 200, "warm exec calls of each cell")
	runs := flag.Int("runs", 20, "pylayer run calls of each cell")
	pylayer := flag.String("pylayer", "bin/pylayer", "the binary under test")
	flag.Parse()
	if *url == "" || *token == "" || *db == "" || *repo == "" || *n < 1 || *runs < 1 {
		return errors.New("-url, -token, -db and -repo are required; -n and -runs at least 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	owner, err := client.New(*url, *token)
	if err != nil {
		return err
	}
	cs, err := owner.CreateSession(ctx, client.NewSession{})
	if err != nil {
		return fmt.Errorf("creating a session: %w", err)
	}
	agent := owner.WithToken(cs.AgentToken)
	id := cs.Session.ID
	cell := func(code string) (time.Duration, error) {
		start := time.Now()
		res, err := agent.Exec(ctx, id, broker.ExecRequest{Code: code, Timeout: 60})
		d := time.Since(start)
		if err == nil && res.Status != broker.RunOK {
			err = fmt.Errorf("exec %q: status %s: %+v\n%s", code, res.Status, res.Error, res.Stderr)
		}
		return d, err
	}
	warm := func(code string) (first time.Duration, l []time.Duration, err error) {
		if first, err = cell(code); err != nil {
			return 0, nil, err
		}
		for range *n {
			d, err := cell(code)
			if err != nil {
				return 0, nil, err
			}
			l = append(l, d)
		}
		return first, l, nil
	}
	perRun := func(code string) ([]time.Duration, error) {
		var l []time.Duration
		for range *runs + 1 {
			cmd := exec.CommandContext(ctx, *pylayer, "run", "--session", id, "--db", *db, "--repo", *repo, "--", "python3", "-c", code)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("pylayer run --session -- python3 -c %q: %w\n%s", code, err, out)
			}
			l = append(l, time.Since(start))
		}
		return l[1:], nil // the first pulls what the session is bound to into this cache
	}
	const imp = "import docx, openpyxl"
	firstPass, pass, err := warm("pass")
	if err != nil {
		return err
	}
	firstImp, imps, err := warm(imp)
	if err != nil {
		return err
	}
	runPass, err := perRun("pass")
	if err != nil {
		return err
	}
	runImp, err := perRun(imp)
	if err != nil {
		return err
	}
	fmt.Printf("warm sessions: one session, %d warm exec calls of each cell, %d pylayer run --session calls of each, in the same run\n", *n, *runs)
	fmt.Printf("first exec of pass (starts the process): %s; first exec of %s: %s\n", ms(firstPass), imp, ms(firstImp))
	fmt.Println("| cell                   | exec p50  | exec p99  | run p50   | run p99   | run/exec p50 | target          |")
	fmt.Println("|------------------------|-----------|-----------|-----------|-----------|--------------|-----------------|")
	verdict := "ok"
	if q(pass, 50) > 5*time.Millisecond {
		verdict = "MISSED"
	}
	fmt.Printf("| pass                   | %9s | %9s | %9s | %9s | %11.1fx | p50 <= 5 ms %-4s|\n",
		ms(q(pass, 50)), ms(q(pass, 99)), ms(q(runPass, 50)), ms(q(runPass, 99)), ratio(q(runPass, 50), q(pass, 50)), verdict)
	fmt.Printf("| %-22s | %9s | %9s | %9s | %9s | %11.1fx | (peer)          |\n", imp,
		ms(q(imps, 50)), ms(q(imps, 99)), ms(q(runImp, 50)), ms(q(runImp, 99)), ratio(q(runImp, 50), q(imps, 50)))
	return nil
}

func q(l []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
