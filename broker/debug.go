package broker

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
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

// ServeDebug serves Go's profiles (under /debug/pprof/, as net/http/pprof names them) and the store's
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
	mux.HandleFunc("/debug/pprof/", serveProfile)
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

// serveProfile serves /debug/pprof/: "profile?seconds=N" (CPU, 30 s by default),
// "trace?seconds=N" (1 s), every runtime/pprof profile by name ("heap", "goroutine",
// "block", "mutex", "allocs", "threadcreate"; "?debug=N" for text), and their list at
// the index, as net/http/pprof answers them. net/http/pprof is not linked: its init
// registers the same handlers on http.DefaultServeMux, in every command of the binary,
// for any server on that mux to expose.
func serveProfile(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	// timed takes a profile that runs for ?seconds=N (def when absent) into w.
	timed := func(def int, what string, start func(io.Writer) error, stop func()) {
		d := time.Duration(def) * time.Second
		if s := r.URL.Query().Get("seconds"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 || n > 300 {
				writeError(w, http.StatusBadRequest, "seconds: want 1 to 300", "")
				return
			}
			d = time.Duration(n) * time.Second
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		if err := start(w); err != nil {
			writeError(w, http.StatusConflict, what+" is being taken already: "+err.Error(), "")
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		stop()
	}
	switch name {
	case "":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "profile?seconds=N\ntrace?seconds=N")
		for _, p := range pprof.Profiles() {
			fmt.Fprintf(w, "%s (%d)\n", p.Name(), p.Count())
		}
	case "profile":
		timed(30, "a CPU profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
	case "trace":
		timed(1, "a trace", trace.Start, trace.Stop)
	default:
		p := pprof.Lookup(name)
		if p == nil {
			writeError(w, http.StatusNotFound, "no profile "+strconv.Quote(name), "")
			return
		}
		debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
		if debug > 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
		}
		p.WriteTo(w, debug) //nolint:errcheck // the client went away
	}
}
