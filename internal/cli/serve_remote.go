//go:build !lean

package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/internal/logctx"
)

// remoteFlags make serve a sandbox host of a broker elsewhere (broker.NewExecHost).
type remoteFlags struct {
	broker   string
	grantTTL time.Duration
}

func (r *remoteFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&r.broker, "broker", "", "serve only the warm sessions' routes, for the broker at this URL: no --db here, each call is authorised by asking it with the caller's own token")
	fl.DurationVar(&r.grantTTL, "grant-ttl", broker.DefaultGrantTTL, "with --broker: how long the broker's yes for a token and session is used without asking again, so how late a rebind or a revoked token is seen (0: ask on every call; at most 10s)")
}

// brokerOnly are serve's flags that mean something only to the broker itself (--db).
var brokerOnly = []string{"db", "catalog", "key", "index-url", "interpreter", "data", "jobs", "build-lease",
	"max-upload", "upload-quota-bytes", "upload-quota-count", "audit-retention", "debug-addr"}

// runExecHost serves the executor routes for the broker at --broker.
func runExecHost(cmd *cobra.Command, g *globals, f *serveFlags) error {
	ctx := cmd.Context()
	log := logctx.From(ctx)
	var set []string
	for _, name := range brokerOnly {
		if cmd.Flags().Changed(name) {
			set = append(set, "--"+name)
		}
	}
	if len(set) > 0 {
		return fmt.Errorf("%s: not with --broker: a sandbox host has no database, builds nothing and takes no uploads; give them to the broker's pylayer serve --db", strings.Join(set, ", "))
	}
	if f.exec.maxLive == 0 {
		return errors.New("--exec-max-live 0 with --broker: a sandbox host that runs no sessions serves nothing; give it 1 or more")
	}
	if f.remote.grantTTL < 0 || f.remote.grantTTL > broker.MaxGrantTTL {
		return fmt.Errorf("--grant-ttl %s: want 0 to %s", f.remote.grantTTL, broker.MaxGrantTTL)
	}
	c, err := client.New(f.remote.broker, "")
	if err != nil {
		return fmt.Errorf("--broker: %w", err)
	}
	hc, err := g.openCache()
	if err != nil {
		return err
	}
	cacheRoot, err := g.cacheDir()
	if err != nil {
		return err
	}
	mgr, err := f.executor(cmd, broker.GrantedSessions, hc, cacheRoot)
	if err != nil {
		return err
	}
	defer mgr.Close()
	ttl := f.remote.grantTTL
	if ttl == 0 {
		ttl = -1 // the library's "ask every call"
	}
	healthz := strings.TrimSuffix(f.remote.broker, "/") + "/healthz"
	srv, err := broker.NewExecHost(broker.ExecHostOptions{Executor: mgr, Authority: client.NewAuthority(c), GrantTTL: ttl,
		Logger: log, HTTP: f.http, Ready: func(ctx context.Context) error { return brokerUp(ctx, healthz) }})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	url := "http://" + ln.Addr().String()
	log.Info("sandbox host listening", "url", url, "broker", f.remote.broker)
	if err := g.print(cmd.OutOrStdout(), map[string]string{"url": url}, url); err != nil {
		ln.Close()
		return err
	}
	return srv.Serve(ctx, ln)
}

// brokerUp checks that the broker answers its liveness check.
func brokerUp(ctx context.Context, healthz string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthz, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("the broker: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the broker's /healthz answered %d", resp.StatusCode)
	}
	return nil
}
