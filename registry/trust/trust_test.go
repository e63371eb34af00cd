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
		"unknown field": `{"repositories": [], "x": 1}`,
		"no keys":       `{"repositories": [{"match": "a/b"}]}`,
		"both":          `{"repositories": [{"match": "a/b", "keys": ["k"], "insecure_accept_unsigned": true}]}`,
		"inner star":    `{"repositories": [{"match": "a/*/b", "keys": ["k"]}]}`,
		"empty match":   `{"repositories": [{"match": " ", "keys": ["k"]}]}`,
		"not json":      `hello`,
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
