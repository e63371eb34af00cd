package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// serveFloor runs the floor: a trivial Go HTTP handler on 127.0.0.1 that answers the
// calls an agent makes (create session, env, ask, poll) with small fixed JSON bodies and
// no work behind them. The same burst against it in the same run is what the broker's
// latencies are divided by. It prints its URL on stdout and serves until SIGTERM or SIGINT.
func serveFloor() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	var n atomic.Int64
	id := func(prefix string) string { return prefix + strconv.FormatInt(n.Add(1), 10) }
	reply := func(w http.ResponseWriter, code int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusCreated, `{"session":{"id":"`+id("ses_")+`","state":"active"},"agent_token":"floor"}`)
	})
	mux.HandleFunc("GET /v1/sessions/{id}/env", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, `{"session":{"id":"`+r.PathValue("id")+`"},"base_packages":[{"name":"pin","version":"1.0"}],"bindings":[],"open_requests":[],"degraded":true}`)
	})
	mux.HandleFunc("POST /v1/sessions/{id}/requests", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusCreated, `{"id":"`+id("req_")+`","session_id":"`+r.PathValue("id")+`","state":"approved"}`)
	})
	mux.HandleFunc("GET /v1/requests/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, `{"id":"`+r.PathValue("id")+`","state":"bound"}`)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s\n", l.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("floor: %w", err)
	}
	fmt.Fprintln(os.Stderr, "floor: stopped")
	return nil
}
