// Command fetchdebs downloads the Debian .deb files that the test fixtures repack (Debian's
// python3.11 prefix, the office set, the curated base) into the fixtures' cache, with apt-get download. `make
// deps` runs it, so that no test and no demo ever fetches or installs anything itself.
//
//	go run ./test/cmd/fetchdebs [-cache DIR] [PACKAGE ...]
//
// Packages already in the cache are not fetched again. It prints the cache directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/pylayer/pylayer/test/fixture"
)

func main() {
	cache := flag.String("cache", fixture.DebCache(), "where the .deb files are kept ($PYLAYER_DEBS)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: fetchdebs [-cache DIR] [PACKAGE ...] (default: every package the fixtures use)")
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := fixture.FetchDebs(ctx, *cache, flag.Args()...); err != nil {
		fmt.Fprintln(os.Stderr, "fetchdebs:", err)
		os.Exit(1)
	}
	fmt.Println(*cache)
}
