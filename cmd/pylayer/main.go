// Command pylayer builds Python environments as signed, content-addressed OCI layers and
// runs sandboxed sessions on them. See the README; the commands live in internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pylayer/pylayer/internal/cli"
)

func main() {
	if cli.IsVersion(os.Args[1:]) { // before the signal handling starts: nothing to cancel
		os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
