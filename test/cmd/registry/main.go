// Command registry runs Debian's docker-registry on 127.0.0.1 the way the tests do (TLS from a
// freshly generated CA, htpasswd auth), for the demo and the benchmarks: it prints
// {"host", "ca_file", "docker_config"} as one JSON line on stdout once the registry answers,
// and stops it on SIGINT/SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	registrytest "github.com/pylayer/pylayer/test/registry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := registrytest.New(ctx, registrytest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
	defer r.Close()
	json.NewEncoder(os.Stdout).Encode(map[string]string{"host": r.Host, "ca_file": r.CAFile, "docker_config": r.DockerConfig})
	<-ctx.Done()
}
