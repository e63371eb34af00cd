// Command pylayer builds Python environments as signed, content-addressed OCI layers and
// runs sandboxed sessions on them. See the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	var code exitCode
	if errors.As(err, &code) {
		os.Exit(int(code)) // the sandboxed command's own status; it already said why
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pylayer: error:", err)
		os.Exit(1)
	}
}
