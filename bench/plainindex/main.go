// Command plainindex serves a directory of wheels as a plain PEP 503 index for the lock
// benchmark (bench/lock.sh): pylayer's own index server with PEP 691 JSON and PEP 658/714
// metadata files turned off, so pages are HTML with #sha256= fragments, no sizes and no
// metadata files, the kind a directory behind a web server gives. Files answer Range
// requests. It prints the index URL on stdout once it listens and serves until killed.
//
//	go run ./bench/plainindex [-listen 127.0.0.1:0] DIR
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/pylayer/pylayer/layers/index"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "plainindex:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("plainindex", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on (port 0 picks a free one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: plainindex [-listen ADDR] DIR")
	}
	srv, err := index.NewServer(fs.Arg(0), index.WithJSON(false), index.WithMetadataFiles(false))
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("-listen %s: %w", *listen, err)
	}
	fmt.Printf("http://%s/simple/\n", ln.Addr())
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	return hs.Serve(ln)
}
