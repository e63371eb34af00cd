//go:build !lean

package cli

import (
	"io"

	"github.com/spf13/cobra"
)

// lean is false in the full binary, which holds every command (see front.go).
const lean = false

// forward is the front end's (front.go); the full binary serves every command line itself.
func forward([]string, io.Writer) int { return 1 }

// commands are the root's subcommands, in the order help lists them, each with the
// constructor that builds it.
var commands = []struct {
	name string
	new  func(*globals) *cobra.Command
}{
	{"index", newIndexCmd}, {"lock", newLockCmd}, {"build", newBuildCmd}, {"publish", newPublishCmd},
	{"pull", newPullCmd}, {"verify", newVerifyCmd}, {"keygen", newKeygenCmd}, {"ls", newLsCmd},
	{"gc", newGCCmd}, {"doctor", newDoctorCmd}, {"run", newRunCmd}, {"ensure", newEnsureCmd},
	{"interpreter", newInterpreterCmd}, {"serve", newServeCmd}, {"token", newTokenCmd},
	{"export", newExportCmd}, {"sbom", newSbomCmd}, {"exec", newExecCmd}, {"shell", newShellCmd},
}
