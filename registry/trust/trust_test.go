package trust

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, dir, name, s string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicy(t *testing.T) {
	dir := t.TempDir()
	pem := write(t, dir, "ci.pub", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
	p, err := Load(pem)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := p.For("127.0.0.1:5000/x"); err != nil || len(d.Keys) != 1 || d.Keys[0] != pem || d.Unsigned {
		t.Fatalf("a key file trusts that key everywhere: %+v %v", d, err)
	}
	pol := write(t, dir, "policy.json", `{"repositories": [
		{"match": "reg:5000/team/*", "keys": ["ci.pub"]},
		{"match": "reg:5000/team/special", "keys": ["/abs/ops.pub"]},
		{"match": "oci:/scratch", "insecure_accept_unsigned": true}
	]}`)
	p, err = Load(pol)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		repo, key string
		unsigned  bool
		err       error
	}{
		{"reg:5000/team/pylayer", pem, false, nil},
		{"reg:5000/team/special", "/abs/ops.pub", false, nil},
		{"oci:/scratch", "", true, nil},
		{"reg:5000/other", "", false, ErrNoPolicy},
		{"reg:5000/teamx/a", "", false, ErrNoPolicy},
	}
	for _, c := range cases {
		d, err := p.For(c.repo)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Fatalf("%s: want %v, got %v", c.repo, c.err, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.repo, err)
		}
		if d.Unsigned != c.unsigned || (c.key != "" && d.Keys[0] != c.key) {
			t.Fatalf("%s: %+v", c.repo, d)
		}
	}
	var nilPolicy *Policy
	if _, err := nilPolicy.For("x"); !errors.Is(err, ErrNoPolicy) {
		t.Fatal("no policy must refuse")
	}
}

func TestPolicyRejects(t *testing.T) {
	dir := t.TempDir()
	for name, s := range map[string]string{
		"unknown field":          `{"repositories": [], "x": 1}`,
		"no keys":                `{"repositories": [{"match": "a/b"}]}`,
		"both":                   `{"repositories": [{"match": "a/b", "keys": ["k"], "insecure_accept_unsigned": true}]}`,
		"inner star":             `{"repositories": [{"match": "a/*/b", "keys": ["k"]}]}`,
		"empty match":            `{"repositories": [{"match": " ", "keys": ["k"]}]}`,
		"star glued":             `{"repositories": [{"match": "reg/team*", "keys": ["k"]}]}`,
		"layout star":            `{"repositories": [{"match": "oci:*", "insecure_accept_unsigned": true}]}`,
		"docker ref on unsigned": `{"repositories": [{"match": "a/b", "insecure_accept_unsigned": true, "require_docker_reference": true}]}`,
		"not json":               `hello`,
	} {
		if _, err := Load(write(t, dir, "p.json", s)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"repositories": [{"match": "a/*", "keys": ["k"]}]}`))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "p")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		pol, err := Load(p)
		if err != nil {
			return
		}
		_, _ = pol.For("reg/x")
	})
}

// TestPolicyNormalizedMatching: rules and repositories match in their normalized form
// (host case, ":443", path case, layout paths), and the most specific rule still wins.
func TestPolicyNormalizedMatching(t *testing.T) {
	dir := t.TempDir()
	pol := write(t, dir, "policy.json", `{"repositories": [
		{"match": "Reg.Example:443/Team/*", "keys": ["/k/team.pub"]},
		{"match": "reg.example/team/special", "keys": ["/k/special.pub"]},
		{"match": "[::1]:443/lab/*", "keys": ["/k/lab.pub"]},
		{"match": "reg.example:5000/team/*", "keys": ["/k/5000.pub"]},
		{"match": "oci:/srv//scratch/", "insecure_accept_unsigned": true},
		{"match": "oci:layouts/*", "keys": ["/k/layouts.pub"]}
	]}`)
	p, err := Load(pol)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		repo, key string // key "": unsigned; "-": no rule
	}{
		{"reg.example/team/pylayer", "/k/team.pub"},
		{"REG.EXAMPLE/team/pylayer", "/k/team.pub"},
		{"reg.example:443/team/pylayer", "/k/team.pub"},
		{"Reg.Example:443/TEAM/pylayer", "/k/team.pub"},
		{"reg.example/team/special", "/k/special.pub"},
		{"reg.example:443/team/special", "/k/special.pub"},
		{"REG.example:443/team/Special", "/k/special.pub"},
		{"reg.example:5000/team/pylayer", "/k/5000.pub"}, // another port is another registry
		{"reg.example:4443/team/pylayer", "-"},
		{"[0:0::1]/lab/x", "/k/lab.pub"},
		{"[::1]:443/lab/x", "/k/lab.pub"},
		{"[::1]:5000/lab/x", "-"},
		{"oci:/srv/scratch", ""},
		{"oci:/srv/scratch/", ""},
		{"oci:/srv/x/../scratch", ""},
		{"oci:/srv/Scratch", "-"},                                       // layout paths keep their case
		{"oci:" + filepath.Join(dir, "layouts", "a"), "/k/layouts.pub"}, // relative to the policy file
		{"oci:/elsewhere/layouts/a", "-"},
		{"reg.example/teams/x", "-"},
	} {
		d, err := p.For(c.repo)
		if c.key == "-" {
			if !errors.Is(err, ErrNoPolicy) {
				t.Errorf("%s: want no rule, got %+v %v", c.repo, d, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.repo, err)
			continue
		}
		if d.Repository != Normalize(c.repo) {
			t.Errorf("%s: decision for %q, want the normalized name %q", c.repo, d.Repository, Normalize(c.repo))
		}
		if c.key == "" {
			if !d.Unsigned {
				t.Errorf("%s: %+v, want unsigned accepted", c.repo, d)
			}
			continue
		}
		if d.Unsigned || len(d.Keys) != 1 || d.Keys[0] != c.key {
			t.Errorf("%s: %+v, want key %s", c.repo, d, c.key)
		}
	}
}

func TestRequireDockerReference(t *testing.T) {
	dir := t.TempDir()
	p, err := Load(write(t, dir, "policy.json", `{"repositories": [
		{"match": "reg.example/prod/*", "keys": ["/k/prod.pub"], "require_docker_reference": true},
		{"match": "reg.example/dev/*", "keys": ["/k/prod.pub"]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	prod, _ := p.For("reg.example/prod/app")
	dev, _ := p.For("reg.example/dev/app")
	for _, c := range []struct {
		d       Decision
		claimed string
		want    bool
	}{
		{prod, "reg.example/prod/app", true},
		{prod, "REG.example:443/prod/app:v1", true},
		{prod, "reg.example/dev/app", false},
		{prod, "", false},
		{dev, "reg.example/prod/app", true}, // not required: any claim counts
		{dev, "", true},
	} {
		if got := c.d.AcceptsReference(c.claimed); got != c.want {
			t.Errorf("rule %q, claim %q: %v, want %v", c.d.Rule.Match, c.claimed, got, c.want)
		}
	}
}
