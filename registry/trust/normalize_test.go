package trust

import "testing"

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"reg.example/team/pylayer", "reg.example/team/pylayer"},
		{"Reg.Example/team/pylayer", "reg.example/team/pylayer"},
		{"REG.EXAMPLE:443/team/pylayer", "reg.example/team/pylayer"},
		{"reg.example:5000/team/pylayer", "reg.example:5000/team/pylayer"},
		{"reg.example:4430/x", "reg.example:4430/x"},
		{"reg.example:80/x", "reg.example:80/x"}, // only the HTTPS default is implied
		{"reg.example/Team/PyLayer", "reg.example/team/pylayer"},
		{"LOCALHOST:5000/a", "localhost:5000/a"},
		{"[::1]:443/a", "[::1]/a"},
		{"[0:0:0:0:0:0:0:1]:5000/a", "[::1]:5000/a"},
		{"[2001:DB8::1]/a", "[2001:db8::1]/a"},
		{"127.0.0.1:443/a", "127.0.0.1/a"},
		{"reg.example:443", "reg.example"},
		{"oci:/srv/scratch", "oci:/srv/scratch"},
		{"oci:/srv/scratch/", "oci:/srv/scratch"},
		{"oci:/srv//x/../Scratch", "oci:/srv/Scratch"}, // directories keep their case
		{"oci:", "oci:"},
		{"[broken/a", "[broken/a"},
		{"OCI:5000/Team", "OCI:5000/team"}, // folded, the host would read as a layout
	} {
		if got := Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := Normalize(Normalize(c.in)); got != c.want {
			t.Errorf("Normalize is not idempotent on %q: %q", c.in, got)
		}
	}
}

func TestSameRepository(t *testing.T) {
	for _, c := range []struct {
		claimed, repo string
		want          bool
	}{
		{"reg.example/team/x", "reg.example/team/x", true},
		{"Reg.Example:443/team/x", "reg.example/team/x", true},
		{"reg.example/team/x:v1", "reg.example/team/x", true},
		{"reg.example/team/x@sha256:" + hex64, "reg.example/team/x", true},
		{"reg.example:5000/team/x:v1@sha256:" + hex64, "reg.example:5000/team/x", true},
		{"oci:/srv/x", "oci:/srv/x/", true},
		{"reg.example/team/y", "reg.example/team/x", false},
		{"reg.example:5000/team/x", "reg.example/team/x", false},
		{"other.example/team/x", "reg.example/team/x", false},
		{"", "reg.example/team/x", false},
		{"reg.example:5000", "reg.example:5000/x", false},
	} {
		if got := SameRepository(c.claimed, c.repo); got != c.want {
			t.Errorf("SameRepository(%q, %q) = %v, want %v", c.claimed, c.repo, got, c.want)
		}
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// FuzzNormalize: normalizing twice changes nothing, and a name always matches itself.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"Reg.Example:443/Team/x", "[::1]:443/a", "oci:/a//b/../c/", "oci:", "a:b:c/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if Normalize(n) != n {
			t.Fatalf("Normalize(%q) = %q, but Normalize(%q) = %q", s, n, n, Normalize(n))
		}
		p := &Policy{Repositories: []Rule{{Match: s, InsecureAcceptUnsigned: true}}}
		if s != "" && p.Repositories[0].validate() == nil {
			if _, err := p.For(s); err != nil {
				t.Fatalf("a rule for %q does not match %q: %v", s, s, err)
			}
		}
	})
}
