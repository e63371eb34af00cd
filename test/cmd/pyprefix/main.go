// Command pyprefix makes a relocatable CPython prefix from Debian's python3.11 packages
// (the .deb files `make deps` downloads, unpacked with dpkg -x), for the demo and the benchmarks: the same fixture the
// tests use. It prints the prefix path.
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
	out := flag.String("out", "", "directory to create the prefix in (must not exist)")
	cache := flag.String("cache", fixture.DebCache(), "where `make deps` keeps the .deb files ($PYLAYER_DEBS)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "usage: pyprefix -out DIR [-cache DIR]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	p, err := fixture.DebianPython(ctx, *cache, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pyprefix:", err)
		os.Exit(1)
	}
	fmt.Println(p)
}
