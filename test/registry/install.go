package registrytest

import (
	"context"
	"fmt"
	"os"
)

// registryBin is where Debian's docker-registry package puts the server.
const registryBin = "/usr/bin/docker-registry"

// ensureInstalled checks that Debian's docker-registry is there. It installs nothing: `make
// deps` does, and a test never installs anything itself.
func ensureInstalled(ctx context.Context) error {
	if _, err := os.Stat(registryBin); err != nil {
		return fmt.Errorf("%s is missing: run `make deps` (apt-get install docker-registry): %w", registryBin, err)
	}
	return ctx.Err()
}
