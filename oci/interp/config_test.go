package interp

import (
	"errors"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/target"
)

func flagsConfig(t testing.TB) Config {
	t.Helper()
	tg, err := target.FromFlags("3.11.2", "manylinux_2_28_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	c := configFromTarget(tg, SourcePrefix)
	c.Tree = "sha256:" + strings.Repeat("ab", 32)
	return c
}

func TestParseConfig(t *testing.T) {
	c := flagsConfig(t)
	canon, err := c.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfig(canon)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := got.Canonical(); string(again) != string(canon) {
		t.Fatal("round trip changed the bytes")
	}
	if !strings.HasPrefix(string(canon), `{"version":"3.11.2","implementation":"cp","abi":"cp311","platform":"manylinux_2_28_x86_64",`) {
		t.Errorf("field order: %.120s", canon)
	}
	for name, mutate := range map[string]func(*Config){
		"mount path":      func(c *Config) { c.MountPath = "/usr" },
		"source path":     func(c *Config) { c.Source = "../x.tar.gz" },
		"source empty":    func(c *Config) { c.Source = "" },
		"tags reordered":  func(c *Config) { c.Tags[0], c.Tags[1] = c.Tags[1], c.Tags[0] },
		"tags short":      func(c *Config) { c.Tags = c.Tags[:10] },
		"abi":             func(c *Config) { c.ABI = "cp310" },
		"version":         func(c *Config) { c.Version = "3.11" },
		"kernel marker":   func(c *Config) { c.Markers["platform_release"] = "6.1.0" },
		"platforms":       func(c *Config) { c.Platforms = c.Platforms[1:] },
		"no tree":         func(c *Config) { c.Tree = "" },
		"tree not sha256": func(c *Config) { c.Tree = "sha512:" + strings.Repeat("ab", 64) },
		"tree short":      func(c *Config) { c.Tree = "sha256:abab" },
	} {
		bad := flagsConfig(t)
		mutate(&bad)
		if _, err := bad.Canonical(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Canonical: %v, want ErrInvalidConfig", name, err)
		}
	}
	s := string(canon)
	for name, b := range map[string]string{
		"indented":      strings.Replace(s, `{"version"`, "{\n  \"version\"", 1),
		"trailing":      s + "\n",
		"trailing doc":  s + "{}",
		"unknown field": strings.Replace(s, `{"version"`, `{"extra":1,"version"`, 1),
		"not json":      "nope",
		"empty":         "",
		"huge":          strings.Repeat(" ", MaxConfigBytes+1),
	} {
		if _, err := ParseConfig([]byte(b)); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestTagFor(t *testing.T) {
	c := flagsConfig(t)
	tag, err := TagFor(c)
	canon, _ := c.Canonical()
	if err != nil || tag != "cpython-3.11.2-"+KeyOf(canon) {
		t.Fatalf("TagFor = %q, %v", tag, err)
	}
	tg, err := target.FromFlags("3.12", "manylinux_2_28_x86_64")
	if err != nil {
		t.Fatal(err)
	}
	tg.PythonFull = "3.12.0rc1+"
	tg.Markers["python_full_version"] = "3.12.0rc1+"
	tg.Markers["implementation_version"] = "3.12.0rc1"
	dev := configFromTarget(tg, SourcePrefix)
	dev.Tree = c.Tree
	if tag, err := TagFor(dev); err != nil || !strings.HasPrefix(tag, "cpython-3.12.0rc1_-") {
		t.Errorf("development version: %q, %v", tag, err)
	}
	long := flagsConfig(t)
	long.Version = "3.11." + strings.Repeat("9", 80)
	if _, err := TagFor(long); err == nil {
		t.Error("a version too long for a tag was accepted")
	}
}

// FuzzParseConfig: arbitrary bytes never panic, and whatever parses is canonical.
func FuzzParseConfig(f *testing.F) {
	canon, err := flagsConfig(f).Canonical()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(canon), "{}", `{"version":"3.11.2"}`, "null", "[]", "", `{"version":"3.11.2",}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		again, err := c.Canonical()
		if err != nil || string(again) != string(b) {
			t.Fatalf("accepted config does not re-encode to itself: %v", err)
		}
		if _, err := TagFor(c); err != nil {
			t.Fatalf("accepted config has no tag: %v", err)
		}
	})
}
