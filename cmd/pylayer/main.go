// Command pylayer builds Python environments as signed, content-addressed OCI layers and
// runs sandboxed sessions on them. See the README; the commands live in internal/cli.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pylayer/pylayer/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.New().ExecuteContext(ctx)
	stop()
	var code cli.ExitCode
	if errors.As(err, &code) {
		os.Exit(int(code)) // the sandboxed command's own status; it already said why
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pylayer: error:", err)
		os.Exit(1)
	}
}
