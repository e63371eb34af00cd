package e2e

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", to read the leases

	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/test/fixture"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// hostsLab is the lab of TestBrokerHosts: host name → last octet of its address.
var hostsLab = map[string]int{"registry": 1, "db": 2, "replica1": 3, "replica2": 4, "hosta": 11, "hostb": 12}

// hostsAttempts bounds the requests made to land one kill -9 mid-build.
const hostsAttempts = 4

// hostsReport is what the session's code prints on each sandbox host.
type hostsReport struct {
	Version string `json:"version"`
	File    string `json:"file"`
	Blob    string `json:"blob"` // sha256 of big/blob.bin as the session reads it
}

const hostsScript = `
import big, hashlib, json, os
blob = open(os.path.join(os.path.dirname(big.__file__), "blob.bin"), "rb").read()
print(json.dumps({"version": big.__version__, "file": big.__file__, "blob": hashlib.sha256(blob).hexdigest()}))
`

// TestBrokerHosts: the fleet on hosts of their own, each in a network namespace on one
// private /24: a registry host (docker-registry with TLS and auth, and the package index),
// a database host (PostgreSQL), two broker replicas (pylayer serve, each with its own
// cache) and two sandbox hosts (each with its own cache). An agent on host A asks for a
// package through replica 1; the replica holding the build's lease is killed with SIGKILL
// mid-build and the other finishes it; then host A (through replica 1) and host B
// (through replica 2) run the session with pylayer run --session --broker and see the
// same package, bytes and digests, with identical cached trees. Nothing is lost (every
// request bound, none left open) and nothing is built twice (one manifest PUT per tag).
func TestBrokerHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	lab := newNetLab(t, hostsLab)
	noProxy := "NO_PROXY=127.0.0.1,localhost," + labNet + ".0/24"

	// The registry host: docker-registry and the package index, on its lab address.
	reg := registrytest.Start(t, registrytest.Options{Listen: lab.addr("registry") + ":5000", Wrap: lab.argv("registry")})
	ops := newHost(t, "DOCKER_CONFIG="+reg.DockerConfig, noProxy) // the operator: publishes, mints tokens
	d := &bkDeploy{h: ops, reg: reg, repo: reg.Ref("team/pylayer"), regArgs: []string{"--ca-file", reg.CAFile}, idxDir: sharedDir(t)}
	d.priv, d.pub = ops.keygen(ctx, t, "cosign")
	bkWrite(t, d.idxDir, fixture.Wheel{Name: "pin", Version: "1.0"})
	idxAddr := lab.addr("registry") + ":8080"
	idx := ops.command(context.Background(), t, "index", "serve", d.idxDir, "--listen", idxAddr)
	lab.startServerIn(t, idx, "registry", "http://"+idxAddr+"/simple/")
	d.proxy = &bkProxy{URL: "http://" + idxAddr + "/simple/"}
	d.baseLock = filepath.Join(ops.home, "base.lock.json")
	ops.must(ctx, t, lockArgs(d.proxy.URL, d.baseLock, []string{"pin"})...)
	d.baseRef = d.publishBase(ctx, t, d.baseLock)
	blobs := map[string]string{} // version → sha256 of its blob.bin
	for i := 1; i <= hostsAttempts; i++ {
		v := fmt.Sprintf("%d.0", i)
		blob := randomBytes(t, 24<<20) // incompressible: the build takes long enough to be killed in
		sum := sha256.Sum256(blob)
		blobs[v] = hex.EncodeToString(sum[:])
		bkWrite(t, d.idxDir, fixture.Wheel{Name: "big", Version: v, Files: []fixture.File{
			{Path: "big/__init__.py", Data: []byte(fmt.Sprintf("__version__ = '%s'\n", v))},
			{Path: "big/blob.bin", Data: blob},
		}})
	}
	d.catalog = filepath.Join(ops.home, "catalog.json")
	if err := os.WriteFile(d.catalog, []byte(bkCatalog), 0o644); err != nil {
		t.Fatal(err)
	}

	// The database host, then the two replicas on it.
	d.db = lab.startPostgres(ctx, t, "db")
	d.admin = d.token(ctx, t, "admin", "root")
	d.owner = d.token(ctx, t, "owner", "alice")
	db, err := sql.Open("pgx", d.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	names := []string{"replica1", "replica2"}
	hosts := []*host{newHost(t, "DOCKER_CONFIG="+reg.DockerConfig, noProxy), newHost(t, "DOCKER_CONFIG="+reg.DockerConfig, noProxy)}
	reps := make([]*bkServe, 2)
	for i := range reps {
		reps[i] = hostsReplica(t, lab, d, hosts[i], names[i])
	}
	sandbox := map[string]*host{
		"hosta": newHost(t, "DOCKER_CONFIG="+reg.DockerConfig, noProxy),
		"hostb": newHost(t, "DOCKER_CONFIG="+reg.DockerConfig, noProxy),
	}
	t.Logf("lab up in %s: registry %s, index %s, database %s, replicas %s and %s, sandbox hosts %s and %s",
		time.Since(t0).Round(time.Millisecond), reg.Host, idxAddr, lab.addr("db")+":5432", reps[0].URL, reps[1].URL, lab.addr("hosta"), lab.addr("hostb"))

	// The agent on host A asks replica 1, from host A's namespace, until one build is
	// killed mid-build (a build may end before its holder is seen: then another version).
	agentA := func(token string) *client.Client {
		c, err := client.New(reps[0].URL, token, client.WithHTTPClient(lab.httpClient("hosta")))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var (
		se                bkSession
		version, reqID    string
		requests          []string
		takeover, bound   time.Duration
		killedName, state string
	)
	for n := 1; n <= hostsAttempts && killedName == ""; n++ {
		version = fmt.Sprintf("%d.0", n)
		se = reps[0].newSession(t, d.owner)
		asked := time.Now()
		r := ok(agentA(se.Agent).Ask(ctx, se.ID, "big=="+version))(t)
		if r.State != "approved" {
			t.Fatalf("big==%s from host A is %s (%s %s), want approved", version, r.State, strings.Join(r.Reasons, " | "), r.Error)
		}
		reqID = r.ID
		requests = append(requests, r.ID)
		holder := -1
		for holder < 0 {
			var lease string
			if err := db.QueryRowContext(ctx, `SELECT state, lease_holder FROM requests WHERE id = $1`, r.ID).Scan(&state, &lease); err != nil {
				t.Fatal(err)
			}
			if state != "approved" && state != "building" {
				break // built before its holder could be seen
			}
			if time.Since(asked) > 3*time.Minute {
				t.Fatalf("big==%s still %s 3 minutes after it was asked", version, state)
			}
			for i, rep := range reps {
				if state == "building" && strings.Contains(lease, fmt.Sprintf("/%d/", rep.cmd.Process.Pid)) {
					holder = i
				}
			}
			time.Sleep(5 * time.Millisecond) // polling the condition: a replica holds the lease
		}
		if holder < 0 {
			t.Logf("attempt %d: big==%s was %s before its build could be caught", n, version, state)
			ok(agentA(se.Agent).Wait(ctx, r.ID))(t)
			continue
		}
		reps[holder].kill9()
		killedAt := time.Now()
		if err := db.QueryRowContext(ctx, `SELECT state FROM requests WHERE id = $1`, r.ID).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state != "building" {
			t.Logf("attempt %d: big==%s was %s when %s died", n, version, state, names[holder])
			reps[holder] = hostsReplica(t, lab, d, hosts[holder], names[holder])
			continue
		}
		killedName = names[holder]
		survivor := reps[1-holder]
		for takeover == 0 {
			var lease, st string
			if err := db.QueryRowContext(ctx, `SELECT state, lease_holder FROM requests WHERE id = $1`, r.ID).Scan(&st, &lease); err != nil {
				t.Fatal(err)
			}
			if st != "building" || strings.Contains(lease, fmt.Sprintf("/%d/", survivor.cmd.Process.Pid)) {
				takeover = time.Since(killedAt)
			} else if time.Since(killedAt) > 2*time.Minute {
				t.Fatalf("nobody took over big==%s 2 minutes after %s died", version, names[holder])
			}
			time.Sleep(10 * time.Millisecond) // polling the condition: the survivor claims the lease
		}
		// Host A's agent long-polls the survivor for the end of its request.
		c, err := client.New(survivor.URL, se.Agent, client.WithHTTPClient(lab.httpClient("hosta")))
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
		got := ok(c.Wait(wctx, r.ID))(t)
		wcancel()
		bound = time.Since(killedAt)
		if got.State != "bound" || got.Digest == "" {
			t.Fatalf("big==%s ended %s (%s %s) after %s died, want bound", version, got.State, strings.Join(got.Reasons, " | "), got.Error, names[holder])
		}
		t.Logf("attempt %d: %s killed mid-build, %s took over after %s, bound %s after the kill",
			n, names[holder], names[1-holder], takeover.Round(time.Millisecond), bound.Round(time.Millisecond))
		reps[holder] = hostsReplica(t, lab, d, hosts[holder], names[holder]) // the dead replica comes back
	}
	if killedName == "" {
		t.Fatalf("none of %d builds could be killed mid-build: they end before their holder is seen", hostsAttempts)
	}
	if takeover > replicaLeaseHosts+2*time.Second+10*time.Second {
		t.Errorf("the build was taken over %s after its holder died; the lease is %s", takeover, replicaLeaseHosts)
	}

	// Host A through replica 1 and host B through replica 2 run the same session.
	env := reps[1].env(t, se.Agent, se.ID)
	digests := []string{env.Session.Base}
	for _, b := range env.Bindings {
		digests = append(digests, b.Digest)
	}
	if len(env.Bindings) != 1 {
		t.Fatalf("the session has bindings %+v, want the one layer of big==%s", env.Bindings, version)
	}
	puts := map[string]int{} // manifest PUTs per ext tag, counted before the runs reset the log
	for _, q := range reg.Requests() {
		if q.Method == http.MethodPut && q.Status < 300 && strings.Contains(q.Path, "/manifests/ext-") {
			puts[q.Path]++
		}
	}
	reg.ResetLog()
	reports := map[string]hostsReport{}
	for i, name := range []string{"hosta", "hostb"} {
		h := sandbox[name]
		start := time.Now()
		args := append([]string{"run", "--session", se.ID, "--broker", reps[i].URL, "--repo", d.repo, "--trust", d.pub, "--timeout", "2m"}, d.regArgs...)
		cmd := lab.wrap(h.command(ctx, t, append(args, "--", "python3", "-c", hostsScript)...), name)
		cmd.Env = append(cmd.Env, "PYLAYER_TOKEN="+se.Agent)
		res := runResult(t, cmd, args)
		if res.code != 0 {
			t.Fatalf("%s: pylayer run --session --broker %s: exit %d\nstdout:\n%s\nstderr:\n%s", name, reps[i].URL, res.code, res.stdout, res.stderr)
		}
		var rep hostsReport
		if err := json.Unmarshal([]byte(strings.TrimSpace(res.stdout)), &rep); err != nil {
			t.Fatalf("%s: the session printed %q: %v", name, res.stdout, err)
		}
		reports[name] = rep
		t.Logf("%s: pylayer run --session --broker %s with a cold cache in %s", name, reps[i].URL, time.Since(start).Round(time.Millisecond))
		if rep.Version != version || rep.Blob != blobs[version] || !strings.HasPrefix(rep.File, "/opt/pylayer/layers/1-ext/") {
			t.Errorf("%s: the session sees big %s from %s, blob sha256 %s; want %s from /opt/pylayer/layers/1-ext/, blob %s",
				name, rep.Version, rep.File, rep.Blob, version, blobs[version])
		}
		layers := cacheEntries(t, h.cache, "layers")
		for _, dg := range digests {
			if !slices.Contains(layers, strings.TrimPrefix(dg, "sha256:")) {
				t.Errorf("%s: the cache's layers %v lack %s of the session", name, layers, dg)
			}
		}
	}
	// Each host pulled every blob of the session's layers itself, over the lab, into its
	// own cache: two GETs per blob.
	checked := 0
	for _, dg := range digests {
		for _, l := range registryManifest(ctx, t, reg, "team/pylayer", dg).Layers {
			checked++
			if n := reg.BlobGETs(l.Digest); n != 2 {
				t.Errorf("blob %s of layer %s was fetched %d times by the two sandbox hosts, want once each", l.Digest, dg, n)
			}
		}
	}
	if checked < len(digests) {
		t.Errorf("%d blobs in the manifests of the session's %d layers", checked, len(digests))
	}
	if reports["hosta"] != reports["hostb"] {
		t.Errorf("the hosts saw different sessions:\nA %+v\nB %+v", reports["hosta"], reports["hostb"])
	}
	a, b := sandbox["hosta"], sandbox["hostb"]
	for _, kind := range []string{"layers", "trees"} {
		ea, eb := cacheEntries(t, a.cache, kind), cacheEntries(t, b.cache, kind)
		if strings.Join(ea, " ") != strings.Join(eb, " ") || len(ea) == 0 {
			t.Errorf("%s differ between the hosts:\nA %v\nB %v", kind, ea, eb)
			continue
		}
		for _, e := range ea {
			if diff := diffSnapshots(snapshot(t, filepath.Join(a.cache, kind, "sha256", e)), snapshot(t, filepath.Join(b.cache, kind, "sha256", e))); len(diff) > 0 {
				t.Errorf("%s/%s differs between the hosts:\n%s", kind, e, strings.Join(diff, "\n"))
			}
		}
	}

	// Nothing lost: every request of the run bound, none left open anywhere.
	for _, id := range requests {
		var st string
		if err := db.QueryRowContext(ctx, `SELECT state FROM requests WHERE id = $1`, id).Scan(&st); err != nil {
			t.Fatal(err)
		}
		if st != "bound" {
			t.Errorf("request %s is %s, want bound", id, st)
		}
	}
	var open, resumes int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM requests WHERE state NOT IN ('bound', 'denied', 'rejected', 'failed')`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 0 {
		t.Errorf("%d requests are left non-terminal", open)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit WHERE action = 'resume' AND request_id = $1`, reqID).Scan(&resumes); err != nil {
		t.Fatal(err)
	}
	if resumes < 1 {
		t.Errorf("the takeover of %s's build is not audited (no resume event)", killedName)
	}
	// Nothing built twice: one manifest PUT per layer tag, one tag per request.
	if len(puts) != len(requests) {
		t.Errorf("%d layer tags pushed for %d requests: %v", len(puts), len(requests), puts)
	}
	for p, c := range puts {
		if c != 1 {
			t.Errorf("%s pushed %d times, want once", p, c)
		}
	}
	t.Logf("%d requests, %d layers pushed once each, %s killed mid-build; whole test %s", len(requests), len(puts), killedName, time.Since(t0).Round(time.Millisecond))
	if t.Failed() {
		for i, rep := range reps {
			t.Logf("%s stderr:\n%s", names[i], rep.stderr)
		}
	}
}

// replicaLeaseHosts is the replicas' build lease in the hosts suite.
const replicaLeaseHosts = 4 * time.Second

// hostsReplica starts pylayer serve on a replica host, on its lab address, with the
// database, registry and index of the lab.
func hostsReplica(t *testing.T, lab *netLab, d *bkDeploy, h *host, name string) *bkServe {
	t.Helper()
	addr := lab.addr(name) + ":8787"
	args := append([]string{"serve", "--listen", addr, "--db", d.db, "--data", filepath.Join(h.home, "uploads"),
		"--catalog", d.catalog, "--repo", d.repo, "--key", d.priv, "--index-url", d.proxy.URL,
		"--build-lease", replicaLeaseHosts.String(), "--jobs", "1"}, d.regArgs...)
	s := &bkServe{stderr: &syncBuf{}, URL: "http://" + addr}
	cmd := h.command(context.Background(), t, args...)
	cmd.Stderr = s.stderr
	s.child = lab.startServerIn(t, cmd, name, s.URL)
	return s
}
