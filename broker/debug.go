package broker

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// DebugOptions configure ServeDebug.
type DebugOptions struct {
	// Store, if it has a DB() *sql.DB (the SQL stores do), has its connection pool's
	// statistics served at /debug/pool.
	Store Store
	// BlockRate and MutexFraction are set for the block and mutex profiles while the
	// debug server runs (runtime.SetBlockProfileRate, SetMutexProfileFraction); 0 keeps
	// them off.
	BlockRate, MutexFraction int
}

// ServeDebug serves Go's profiles (net/http/pprof under /debug/pprof/) and the store's
// pool statistics (/debug/pool) on addr until ctx ends. It is for measuring the broker
// under load and refuses any address but a loopback one: a profile shows what the
// process holds. It is never on unless a caller starts it (serve's hidden --debug-addr).
func ServeDebug(ctx context.Context, addr string, o DebugOptions) (net.Addr, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("debug address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("debug address %q: %w: only a loopback address (127.0.0.1:PORT) may serve profiles", addr, ErrInvalid)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pool", func(w http.ResponseWriter, r *http.Request) {
		db, ok := o.Store.(interface{ DB() *sql.DB })
		if !ok {
			writeError(w, http.StatusNotFound, "this store has no connection pool", "")
			return
		}
		st := db.DB().Stats()
		writeJSON(w, http.StatusOK, map[string]any{
			"max_open": st.MaxOpenConnections, "open": st.OpenConnections, "in_use": st.InUse, "idle": st.Idle,
			"wait_count": st.WaitCount, "wait_duration_ms": float64(st.WaitDuration) / float64(time.Millisecond),
			"max_idle_closed": st.MaxIdleClosed, "max_lifetime_closed": st.MaxLifetimeClosed,
		})
	})
	runtime.SetBlockProfileRate(o.BlockRate)
	runtime.SetMutexProfileFraction(o.MutexFraction)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		hs.Close()
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
	}()
	go hs.Serve(ln) //nolint:errcheck // best effort: ErrServerClosed at ctx's end, the broker serves on
	return ln.Addr(), nil
}
