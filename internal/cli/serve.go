//go:build !lean

package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/broker/builder"
	"github.com/pylayer/pylayer/broker/executor"
	"github.com/pylayer/pylayer/broker/stores"
	"github.com/pylayer/pylayer/catalog"
	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/oci/sign"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/sandbox"
)

type serveFlags struct {
	regFlags
	listen, db, catalog, repo, key, indexURL, data, interpreter string
	debugAddr                                                   string
	jobs                                                        int
	http                                                        broker.HTTPLimits
	maxUpload                                                   int64
	quota                                                       broker.UploadQuota
	lease                                                       time.Duration
	auditRetention                                              retention
	exec                                                        execFlags
	remote                                                      remoteFlags
	sandboxFlags
}

// execFlags are the warm sessions' (broker/executor) on the host that runs them.
type execFlags struct {
	dir     string
	idle    time.Duration
	maxLive int
	maxFile int64
}

func newServeCmd(g *globals) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use: "serve --listen 127.0.0.1:8787 --db PATH | --broker URL",
		Example: `  # one broker on SQLite
  pylayer serve --listen 127.0.0.1:8787 --db broker.db --repo reg/team/pylayer --key ci.key --index-url https://pypi.internal/simple

  # a replica of a fleet's broker on PostgreSQL (password in PGPASSWORD or ~/.pgpass)
  pylayer serve --listen 0.0.0.0:8787 --db 'postgres://broker@db.internal/broker?sslmode=verify-full' ...

  # a host that runs the sessions' sandboxes for a broker elsewhere (no database here)
  pylayer serve --listen 0.0.0.0:8788 --broker https://broker.internal:8787 --repo reg/team/pylayer`,
		Short: "Run the request broker: the HTTP service through which agents get packages",
		Long: `Run the broker: agents ask for packages for their session, policy (the catalog) decides
what is built at once, what waits for an approver and what is refused, and approved layers
are built, published, signed and bound to the session. It starts with only --listen and
--db, so you can look around (GET /openapi.json, /healthz, /metrics); requests are resolved
and built once --index-url, --repo and --key are set. Mint tokens with pylayer token create.

With --broker URL instead of --db it is a sandbox host of that broker: it serves only the
warm sessions' routes (exec, shell, files, runs, cancel), asking the broker with each
caller's own token whether it may use the session and what the session is bound to.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, g, f) },
	}
	f.regFlags.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8787", "address to listen on")
	fl.StringVar(&f.db, "db", "", "the broker's database: an SQLite file (created if missing) or a postgres://user@host/db URL (required)")
	fl.StringVar(&f.catalog, "catalog", "", "catalog file (YAML or JSON): allowlist, denylist, caps (default: every request waits for an approver)")
	fl.StringVar(&f.repo, "repo", os.Getenv("PYLAYER_REPO"), "repository layers are published to (HOST/path or oci:DIR)")
	fl.StringVar(&f.key, "key", "", "cosign private key that signs built layers (password from COSIGN_PASSWORD)")
	fl.StringVar(&f.indexURL, "index-url", os.Getenv("PYLAYER_INDEX_URL"), "package index requests are resolved against")
	fl.StringVar(&f.interpreter, "interpreter", "", "target interpreter prefix to compile .pyc with")
	fl.StringVar(&f.data, "data", "", "directory for uploaded wheels (default: beside --db)")
	fl.IntVar(&f.jobs, "jobs", 2, "builds at a time")
	fl.DurationVar(&f.lease, "build-lease", broker.DefaultBuildLease, "how long a build stays this replica's without renewal, and a request its classification without a touch; another replica takes it over after")
	fl.DurationVar(&f.http.ReadHeaderTimeout, "read-header-timeout", broker.DefaultReadHeaderTimeout, "time for a request's headers to arrive")
	fl.DurationVar(&f.http.ReadTimeout, "read-timeout", broker.DefaultReadTimeout, "time for a whole request, body included, to arrive (uploads: --upload-timeout)")
	fl.DurationVar(&f.http.WriteTimeout, "write-timeout", broker.DefaultWriteTimeout, "time for an answer to leave (long polls get their wait on top)")
	fl.DurationVar(&f.http.IdleTimeout, "idle-timeout", broker.DefaultIdleTimeout, "time a keep-alive connection may stay idle")
	fl.DurationVar(&f.http.UploadTimeout, "upload-timeout", broker.DefaultUploadTimeout, "time for an uploaded wheel's body to arrive")
	fl.IntVar(&f.http.MaxHeaderBytes, "max-header-bytes", broker.DefaultMaxHeaderBytes, "size of a request's headers (431 past it)")
	fl.IntVar(&f.http.MaxConns, "max-conns", broker.DefaultMaxConns, "open connections (503 past it); each long poll holds one")
	fl.Int64Var(&f.maxUpload, "max-upload", broker.DefaultMaxUpload, "size of one uploaded wheel, in bytes")
	fl.Int64Var(&f.quota.Bytes, "upload-quota-bytes", broker.DefaultQuotaBytes, "bytes of uploaded wheels one session holds at once")
	fl.IntVar(&f.quota.Count, "upload-quota-count", broker.DefaultQuotaCount, "uploaded wheels one session holds at once")
	fl.StringVar(&f.exec.dir, "sessions-dir", "", "directory of the warm sessions' workspaces, one per session, kept across restarts; the sandbox user must be able to enter it (default: workspaces under the host cache)")
	fl.DurationVar(&f.exec.idle, "exec-idle", executor.DefaultIdleTimeout, "stop a session's warm Python process after it has been idle this long")
	fl.IntVar(&f.exec.maxLive, "exec-max-live", executor.DefaultMaxLive, "warm session processes on this host at once; starting one more stops the longest idle (0: this broker runs no sessions)")
	fl.Int64Var(&f.exec.maxFile, "exec-max-file", executor.DefaultMaxFile, "largest file written to a session's workspace through the API, in bytes")
	f.sandboxFlags.register(cmd)
	fl.MarkHidden("raw-output") // a server shows no session output on a terminal
	fl.MarkHidden("cache-dir")  // each session gets a cache of its own
	fl.StringVar(&f.debugAddr, "debug-addr", "", "serve Go profiles (with block and mutex profiling on) and the store's pool statistics on this loopback address, to measure the broker")
	fl.MarkHidden("debug-addr") // for benchmarks: never on by default
	f.remote.register(cmd)
	fl.Var(&f.auditRetention, "audit-retention", "delete audit events older than this (90d, 720h; default off: keep every event); pruning runs hourly and is itself audited")
	return cmd
}

// executor builds the manager of warm sessions on the sandboxes' limits and layers as
// pylayer run has them; nil (the routes answer 501) when this host cannot run them.
func (f *serveFlags) executor(cmd *cobra.Command, store broker.SessionSource, hc *cache.Cache, cacheRoot string) (*executor.Manager, error) {
	log := logctx.From(cmd.Context())
	if f.exec.maxLive == 0 {
		return nil, nil
	}
	if f.exec.dir == "" {
		// under the host cache, which the sandbox user may enter (the database's
		// directory is usually closed to it)
		f.exec.dir = filepath.Join(cacheRoot, "workspaces")
	}
	bwrap, err := sandbox.FindBwrap()
	if err != nil && f.remote.broker != "" {
		return nil, fmt.Errorf("--broker: this host is to run the sessions' sandboxes: %w", err)
	}
	if err != nil {
		log.Warn("sessions cannot run code on this host", "err", err)
		return nil, nil
	}
	lim, err := f.limits()
	if err != nil {
		return nil, err
	}
	ao := f.assembly(cmd, hc)
	ao.Progress = nil // no progress bars from a server
	ao.Warn = func(s string) { log.Warn(s) }
	m, err := executor.New(executor.Options{Sessions: store, Repo: f.repo, Assembly: ao, Bwrap: bwrap, User: f.user,
		Limits: lim, Root: f.exec.dir, IdleTimeout: f.exec.idle, MaxLive: f.exec.maxLive, MaxFile: f.exec.maxFile,
		Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--sessions-dir: %w", err)
	}
	return m, nil
}

// unconfigured is the classifier of a broker started without an index, repository or key.
type unconfigured struct{ missing string }

func (u unconfigured) Classify(context.Context, broker.Session, []string, *broker.Upload) (broker.Request, error) {
	return broker.Request{State: broker.StateRejected, Decision: string(catalog.Rejected),
		Reasons: []string{"this broker cannot resolve requests yet: start pylayer serve with " + u.missing}}, nil
}

func runServe(cmd *cobra.Command, g *globals, f *serveFlags) error {
	ctx := cmd.Context()
	log := logctx.From(ctx)
	if f.remote.broker != "" {
		return runExecHost(cmd, g, f)
	}
	if f.db == "" {
		return errors.New("--db is required: the SQLite file or postgres:// URL that holds sessions, requests, bindings and the audit log")
	}
	store, err := stores.Open(ctx, f.db)
	if err != nil {
		return err
	}
	defer store.Close()
	if f.data == "" {
		if !stores.LocalPath(f.db) {
			return errors.New("--data is required with a PostgreSQL --db: the directory for uploaded wheels")
		}
		f.data = filepath.Join(filepath.Dir(f.db), "uploads")
	}
	opts := broker.Options{Store: store, Logger: log, DataDir: f.data, HTTP: f.http, MaxUpload: f.maxUpload, Quota: f.quota,
		AuditRetention: time.Duration(f.auditRetention), ClassifyStale: f.lease}
	hc, err := g.openCache()
	if err != nil {
		return err
	}
	hl := &hostLayers{store: store, cache: hc}
	opts.Layers, opts.GC = hl, hl
	var worker *builder.Worker
	var missing []string
	for flag, v := range map[string]string{"--index-url": f.indexURL, "--repo": f.repo, "--key": f.key} {
		if v == "" {
			missing = append(missing, flag)
		}
	}
	if len(missing) > 0 {
		opts.Classifier = unconfigured{missing: fmt.Sprint(missing)}
		log.Warn("requests cannot be built until these are set", "missing", missing)
	} else {
		cat := catalog.Default()
		if f.catalog != "" {
			if cat, err = catalog.Load(f.catalog); err != nil {
				return err
			}
		}
		cache, err := g.cacheDir()
		if err != nil {
			return err
		}
		idx, err := index.New(f.indexURL, index.WithMetadataCache(filepath.Join(cache, "metadata")))
		if err != nil {
			return fmt.Errorf("--index-url: %w", err)
		}
		signer, err := sign.LoadSigner(ctx, f.key, nil)
		if err != nil {
			return err
		}
		_, repo, err := f.open(cmd, f.repo)
		if err != nil {
			return err
		}
		hl.repo = repo
		interp, err := build.Interpreter(f.interpreter)
		if err != nil {
			return err
		}
		// Not TrustedWheels: the broker installs agents' uploads, whose bytes meet Go's
		// inflater only.
		worker, err = builder.New(builder.Config{Store: store, Catalog: cat, Index: idx, Repo: repo, Signer: signer,
			Trees: &build.Builder{Root: filepath.Join(cache, "build"), Fetcher: idx, Options: build.Options{Interpreter: interp}}, Logger: log, Lease: f.lease})
		if err != nil {
			return err
		}
		opts.Classifier, opts.Builder, opts.Rebaser, opts.SessionDefaults = worker, worker, worker, worker.Current
	}
	cacheRoot, err := g.cacheDir()
	if err != nil {
		return err
	}
	mgr, err := f.executor(cmd, store, hc, cacheRoot)
	if err != nil {
		return err
	}
	if mgr != nil {
		defer mgr.Close()
		opts.Executor = mgr
	}
	srv, err := broker.NewServer(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if f.debugAddr != "" {
		a, err := broker.ServeDebug(ctx, f.debugAddr, broker.DebugOptions{Store: store, BlockRate: 10000, MutexFraction: 10})
		if err != nil {
			ln.Close()
			return fmt.Errorf("--debug-addr: %w", err)
		}
		log.Info("debug server listening", "url", "http://"+a.String()+"/debug/pprof/")
	}
	var wg sync.WaitGroup
	if worker != nil {
		worker.SetNotify(srv.Notify)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := worker.Run(ctx, f.jobs); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("builder stopped", "err", err)
			}
		}()
	}
	url := "http://" + ln.Addr().String()
	log.Info("broker listening", "url", url, "db", stores.Redact(f.db))
	if err := g.print(cmd.OutOrStdout(), map[string]string{"url": url}, url); err != nil {
		ln.Close()
		return err
	}
	// Serve returns when ctx ends (a signal), after a graceful shutdown, or when serving fails.
	err = srv.Serve(ctx, ln)
	cancel()
	wg.Wait()
	return err
}
