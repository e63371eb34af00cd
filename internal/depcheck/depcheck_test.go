package depcheck

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

const module = "github.com/pylayer/pylayer/"

// forbidden maps a package tree to the trees its (non-test) code must never import.
var forbidden = map[string][]string{
	"layers":   {"oci", "registry", "sandbox", "broker", "catalog", "publish", "internal/cli"},
	"oci":      {"registry", "sandbox", "broker", "catalog", "publish", "internal/cli"},
	"oci/sbom": {"oci/sign"}, // an SBOM is content; signing it is its caller's business
	"oci/sign": {"oci/sbom"}, // signing knows no predicate
	"registry": {"sandbox", "broker", "catalog", "publish", "internal/cli"},
	"sandbox":  {"layers", "oci", "registry", "broker", "catalog", "publish", "internal/cli"},
	"catalog":  {"oci", "registry", "sandbox", "broker", "publish", "internal/cli"},
	"publish":  {"sandbox", "broker", "catalog", "internal/cli"},
	"assemble": {"broker", "catalog", "publish", "internal/cli"},
	// The broker serves sessions and never runs one: sandboxes are broker/executor's,
	// behind the broker.Executor interface.
	"broker": {"internal/cli", "sandbox", "assemble"},
}

// only maps a package tree to the only packages of the module (exactly these, not
// their trees) its (non-test) code may import besides its own tree; it replaces the
// forbidden rules of the trees it is inside.
var only = map[string][]string{
	// the manager of warm session processes joins the broker's types to the sandbox
	"broker/executor": {"broker", "assemble", "sandbox", "sandbox/kernel"},
}

// allowed reports whether pkg may import imp (both module-relative).
func allowed(pkg, imp string) bool {
	for tree, ok := range only {
		if under(pkg, tree) {
			return slices.Contains(ok, imp) || under(imp, tree)
		}
	}
	for tree, bad := range forbidden {
		if under(pkg, tree) && underAny(imp, bad) && !under(imp, tree) {
			return false
		}
	}
	return true
}

// testSupport are the trees only tests, test tools and benchmarks may import.
var testSupport = []string{"internal/testenv", "internal/pyoracle", "test", "broker/storetest", "broker/postgres/pgtest"}

// under reports whether pkg (module-relative) is tree or inside it.
func under(pkg, tree string) bool { return pkg == tree || strings.HasPrefix(pkg, tree+"/") }

func underAny(pkg string, trees []string) bool {
	for _, t := range trees {
		if under(pkg, t) {
			return true
		}
	}
	return false
}

// imports lists, for every package of the module, the module packages its non-test code
// imports (go list, so build constraints are what the build sees).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-e", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	m := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		m[pkg] = nil
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				m[pkg] = append(m[pkg], rel)
			}
		}
	}
	if len(m) < 20 {
		t.Fatalf("go list found only %d packages of the module:\n%s", len(m), out)
	}
	return m
}

// rule says what pkg may not import, for an error message.
func rule(pkg string) string {
	for tree, ok := range only {
		if under(pkg, tree) {
			return tree + " may import only " + strings.Join(ok, ", ") + " of the module"
		}
	}
	var rules []string
	for tree, bad := range forbidden {
		if under(pkg, tree) {
			rules = append(rules, tree+" must never import "+strings.Join(bad, ", "))
		}
	}
	return strings.Join(rules, "; ")
}

// TestArrows: each package imports only what its layer may.
func TestArrows(t *testing.T) {
	for pkg, imps := range imports(t) {
		for _, imp := range imps {
			if !allowed(pkg, imp) {
				t.Errorf("%s imports %s: %s", pkg, imp, rule(pkg))
			}
			if under(imp, "internal/cli") && pkg != "cmd/pylayer" {
				t.Errorf("%s imports internal/cli: only cmd/pylayer may", pkg)
			}
			if underAny(imp, testSupport) && !underAny(pkg, testSupport) && !under(pkg, "bench") {
				t.Errorf("%s imports the test support package %s: only tests, test/ and bench/ may", pkg, imp)
			}
		}
	}
}

// TestRules: the rule table itself catches what it should (so a broken under cannot make
// TestArrows pass vacuously).
func TestRules(t *testing.T) {
	for _, c := range []struct {
		pkg, imp string
		ok       bool
	}{
		{"layers/lock", "oci", false},
		{"layers/resolve", "layers/lock", true},
		{"sandbox", "layers/lock", false},
		{"sandbox/seccomp", "sandbox", true},
		{"registry/cache", "broker", false},
		{"oci/interp", "registry", false},
		{"oci/sbom", "oci/sign", false},
		{"oci/sbom", "registry", false},
		{"oci/sbom", "layers/lock", true},
		{"oci/sign", "oci/sbom", false},
		{"publish", "oci/sbom", true},
		{"broker/builder", "registry", true},
		{"assemble", "broker", false},
		{"assemble", "sandbox", true},
		{"registryx", "broker", true}, // not the registry tree
		{"broker", "sandbox", false},
		{"broker", "assemble", false},
		{"broker/builder", "sandbox", false},
		{"broker/executor", "sandbox", true},
		{"broker/executor", "sandbox/kernel", true},
		{"broker/executor", "assemble", true},
		{"broker/executor", "broker", true},
		{"broker/executor", "broker/sqlite", false}, // inside broker, not allowed by only
		{"broker/executor", "catalog", false},
		{"broker/executor", "internal/cli", false},
		{"broker/executorx", "sandbox", false}, // not the executor tree
	} {
		if got := allowed(c.pkg, c.imp); got != c.ok {
			t.Errorf("%s importing %s: allowed %v, want %v", c.pkg, c.imp, got, c.ok)
		}
	}
}

// heavy are the packages the front end (cmd/pylayer built with -tags lean) must not link:
// their package init runs before main on every start, and only commands it hands to the
// full binary use them (stores, signing at publish, the catalog's YAML, SBOMs, builds).
var heavy = []string{
	"modernc.org/", "github.com/jackc/", "go.yaml.in/", "gopkg.in/yaml", "github.com/sigstore/",
	module + "broker/stores", module + "broker/sqlite", module + "broker/postgres", module + "broker/sqlstore",
	module + "broker/builder", module + "catalog", module + "publish", module + "oci/sbom",
	// The registry protocol: a warm run is served by registry/local, and a pull goes to the
	// full binary.
	"github.com/google/go-containerregistry/pkg/authn", "github.com/google/go-containerregistry/pkg/v1/remote",
	"github.com/docker/", "github.com/sirupsen/logrus",
	// The zstd decoder (oci/zstd.go): only an unpack reads tar+zstd, and the front end
	// unpacks nothing; its init (snapref's CRC-32C table) was ~0.2 ms of every start.
	"github.com/klauspost/compress/zstd", "github.com/klauspost/compress/internal/snapref",
	// go-digest compiles five regexps in its init (~0.2-0.3 ms of every start); the OCI
	// types are this module's own (oci/digest, oci/spec/v1), and image-spec's import it.
	"github.com/opencontainers/go-digest", "github.com/opencontainers/image-spec",
}

// heavyExact are heavy packages named exactly (their subpackages may be linked).
var heavyExact = []string{module + "registry"}

// deps lists every package the main package links with the build tags given.
func deps(t *testing.T, tags string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", tags, module+"cmd/pylayer")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %q: %v\n%s", tags, err, stderr.String())
	}
	return strings.Fields(string(out))
}

// TestFrontEndIsLean: the front end links none of the heavy packages, while the full binary,
// listed the same way, does (so that a list that finds nothing cannot pass).
func TestFrontEndIsLean(t *testing.T) {
	linked := func(pkgs []string, h string) bool {
		return slices.ContainsFunc(pkgs, func(p string) bool { return p == h || strings.HasPrefix(p, h) })
	}
	lean, full := deps(t, "lean"), deps(t, "")
	for _, h := range heavy {
		if linked(lean, h) {
			t.Errorf("the front end (-tags lean) links %s", h)
		}
	}
	for _, h := range heavyExact {
		if slices.Contains(lean, h) {
			t.Errorf("the front end (-tags lean) links %s", h)
		}
		if !slices.Contains(full, h) {
			t.Errorf("the full binary does not link %s: is the list right?", h)
		}
	}
	for _, h := range []string{"modernc.org/sqlite", "github.com/jackc/pgx/v5", module + "catalog", module + "publish",
		"github.com/google/go-containerregistry/pkg/v1/remote", "github.com/docker/", "github.com/klauspost/compress/zstd",
		"github.com/opencontainers/go-digest"} {
		if !linked(full, h) {
			t.Errorf("the full binary does not link %s: is the list right?", h)
		}
	}
	if !slices.Contains(lean, module+"registry/local") {
		t.Error("the front end does not link registry/local: how does it decide a warm run?")
	}
	if !linked(lean, module+"sandbox") || !linked(lean, module+"assemble") {
		t.Error("the front end links no sandbox or assemble: it cannot run a session")
	}
}
