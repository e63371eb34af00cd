//go:build !lean

package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/index"
)

func newIndexCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "index", Short: "Work with Python package indexes"}
	cmd.AddCommand(newIndexServeCmd(g))
	return cmd
}

func newIndexServeCmd(g *globals) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use: "serve DIR",
		Example: `  # serve ./wheels (with PEP 658 metadata) on a free port and print its URL
  pylayer index serve ./wheels --listen 127.0.0.1:0`,
		Short: "Serve a directory of wheels as a package index (PEP 503, 691, 658)",
		Long: `Serve a flat directory of wheels (and sdists) as a simple-API package index, so that
air-gapped hosts and tests have one. A file NAME.yanked beside NAME marks it yanked (its
content is the reason). Prints the index URL on stdout once it listens; stops on SIGINT/SIGTERM.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			fi, err := os.Stat(args[0])
			if err != nil {
				return fmt.Errorf("index directory: %w", err)
			}
			if !fi.IsDir() {
				return fmt.Errorf("index directory: %s is not a directory", args[0])
			}
			srv, err := index.NewServer(args[0])
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			url := fmt.Sprintf("http://%s/simple/", ln.Addr())
			hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(ln) }()
			logctx.From(ctx).Info("serving index", "dir", args[0], "url", url)
			if err := g.print(cmd.OutOrStdout(), map[string]string{"url": url, "dir": args[0]}, url); err != nil {
				return err
			}
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on (port 0 picks a free one)")
	return cmd
}
