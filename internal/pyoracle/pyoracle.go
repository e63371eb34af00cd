package pyoracle

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
)

// prelude starts every script: warnings off, the vendored packaging must be 21.3, and the
// input is read into inp. epilogue ends it: out is written as JSON.
const (
	prelude = `import json, sys, warnings
warnings.simplefilter("ignore")
from pip._vendor import packaging
assert packaging.__version__ == "21.3", packaging.__version__
inp = json.load(sys.stdin)
`
	epilogue = `
json.dump(out, sys.stdout)
`
)

// Run runs script under pip's vendored packaging 21.3 and decodes what it computes into
// output. The script finds input, decoded from JSON, in the variable inp and leaves its
// answer, which must encode as JSON, in the variable out; json and sys are imported. The
// interpreter is $PYLAYER_PYTHON, else python3 on PATH; a missing one fails the test, never
// skips it: agreeing with pip is the point of the tests that call this.
func Run(t testing.TB, script string, input, output any) {
	t.Helper()
	py := os.Getenv("PYLAYER_PYTHON")
	if py == "" {
		var err error
		if py, err = exec.LookPath("python3"); err != nil {
			t.Fatalf("python3 (the pip oracle) not found: %v; install it or set PYLAYER_PYTHON", err)
		}
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", prelude+script+epilogue)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running oracle %s: %v\n%s", py, err, stderr.String())
	}
	if err := json.Unmarshal(out, output); err != nil {
		t.Fatalf("decoding oracle output: %v", err)
	}
}
