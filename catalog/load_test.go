package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		format  Format
		in      string
		want    *Catalog
		wantErr string // substring; "" = success
	}{
		{"json full", JSON, `{"base":["numpy>=2"],"allow":[{"name":"Python_Docx","spec":">=1,<3"},{"name":"six"}],"deny":["PyCrypto"],"max_wheel_bytes":10,"max_layer_bytes":20}`,
			&Catalog{Base: []string{"numpy>=2"}, Allow: []Rule{{"python-docx", ">=1,<3"}, {"six", ""}}, Deny: []string{"pycrypto"}, MaxWheelBytes: 10, MaxLayerBytes: 20}, ""},
		{"yaml full", YAML, "base: [numpy>=2]\nallow:\n  - name: Python_Docx\n    spec: '>=1,<3'\n  - name: six\ndeny: [PyCrypto]\nmax_wheel_bytes: 10\nmax_layer_bytes: 20\n",
			&Catalog{Base: []string{"numpy>=2"}, Allow: []Rule{{"python-docx", ">=1,<3"}, {"six", ""}}, Deny: []string{"pycrypto"}, MaxWheelBytes: 10, MaxLayerBytes: 20}, ""},
		{"json empty object", JSON, `{}`, &Catalog{}, ""},
		{"yaml empty mapping", YAML, `{}`, &Catalog{}, ""},
		{"json unknown field", JSON, `{"denny":["x"]}`, nil, "denny: unknown field"},
		{"json case variant", JSON, `{"DENY":["x"]}`, nil, "DENY: unknown field"},
		{"json unknown rule field", JSON, `{"allow":[{"name":"x","version":"1"}]}`, nil, "allow[0].version: unknown field"},
		{"json duplicate key", JSON, `{"deny":["x"],"deny":[]}`, nil, "deny: duplicate key"},
		{"json duplicate rule key", JSON, `{"allow":[{"name":"x","name":"y"}]}`, nil, "allow[0].name: duplicate key"},
		{"json rule not object", JSON, `{"allow":["x"]}`, nil, "allow[0]: must be an object"},
		{"json trailing data", JSON, `{} {}`, nil, "trailing data"},
		{"json not object", JSON, `["x"]`, nil, "must be a JSON object"},
		{"json empty", JSON, ``, nil, "empty"},
		{"json wrong type", JSON, `{"max_wheel_bytes":"10MiB"}`, nil, "max_wheel_bytes"},
		{"json float cap", JSON, `{"max_wheel_bytes":1.5}`, nil, "max_wheel_bytes"},
		{"json syntax", JSON, `{"deny":[}`, nil, "decoding JSON"},
		{"yaml unknown field", YAML, "denny: [x]\n", nil, "field denny not found"},
		{"yaml case variant", YAML, "Deny: [x]\n", nil, "field Deny not found"},
		{"yaml unknown rule field", YAML, "allow:\n  - name: x\n    version: '1'\n", nil, "field version not found"},
		{"yaml duplicate key", YAML, "deny: [x]\ndeny: []\n", nil, "already defined"},
		{"yaml two documents", YAML, "deny: [x]\n---\ndeny: [y]\n", nil, "one document"},
		{"yaml empty", YAML, "", nil, "empty"},
		{"yaml not mapping", YAML, "- x\n", nil, "must be a mapping"},
		{"yaml null", YAML, "~\n", nil, "must be a mapping"},
		{"yaml bare document", YAML, "---\n", nil, "must be a mapping"},
		{"yaml comment only", YAML, "# nothing\n", nil, "empty"},
		{"yaml alias", YAML, "deny: &d [x]\nbase: *d\n", &Catalog{Base: []string{"x"}, Deny: []string{"x"}}, "base[0]: x is on the base list and denylisted"},
		{"yaml cap text", YAML, "max_layer_bytes: 10MiB\n", nil, "cannot unmarshal"},
		{"invalid deny name", JSON, `{"deny":["bad name"]}`, nil, `deny[0]: "bad name" is not a valid project name`},
		{"invalid allow name", JSON, `{"allow":[{"name":"-x"}]}`, nil, `allow[0].name: "-x" is not a valid project name`},
		{"missing allow name", YAML, "allow:\n  - spec: '>=1'\n", nil, `allow[0].name: "" is not a valid project name`},
		{"invalid spec", JSON, `{"allow":[{"name":"x","spec":">=1,foo"}]}`, nil, "allow[0].spec: "},
		{"allowed and denied", JSON, `{"allow":[{"name":"a"},{"name":"Foo.Bar"}],"deny":["foo_bar"]}`, nil, "allow[1].name: Foo.Bar is also denylisted (deny[0])"},
		{"base and denied", JSON, `{"base":["numpy","foo-bar>=1"],"deny":["Foo_Bar"]}`, nil, "base[1]: foo-bar is on the base list and denylisted (deny[0])"},
		{"base invalid", JSON, `{"base":["numpy>>2"]}`, nil, "base[0]: "},
		{"base url", JSON, `{"base":["x @ https://example.com/x-1.0-py3-none-any.whl"]}`, nil, "base[0]: "},
		{"negative wheel cap", JSON, `{"max_wheel_bytes":-1}`, nil, "max_wheel_bytes: -1 is negative"},
		{"negative layer cap", YAML, "max_layer_bytes: -5\n", nil, "max_layer_bytes: -5 is negative"},
		{"unknown format", Format(9), `{}`, nil, "unknown format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in), tt.format)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse succeeded (%+v), want error containing %q", got, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("error %v does not wrap ErrInvalid", err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseTooBig(t *testing.T) {
	data := []byte(`{"deny":["` + strings.Repeat("a", MaxFileBytes) + `"]}`)
	if _, err := Parse(data, JSON); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Parse of %d bytes: err = %v, want a size error", len(data), err)
	}
}

func TestParseDeepJSON(t *testing.T) {
	data := []byte(`{"base":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`)
	if _, err := Parse(data, JSON); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("err = %v, want a depth error", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{"example yaml", "testdata/catalog.yaml", ""},
		{"json", write("c.json", `{"deny":["x"]}`), ""},
		{"yml upper case", write("c.YML", "deny: [x]\n"), ""},
		{"json content in yaml file", write("j.yaml", `{"deny":["x"]}`), ""},
		{"yaml content in json file", write("y.json", "deny: [x]\n"), "decoding JSON"},
		{"unknown extension", write("c.toml", `deny = ["x"]`), `unknown extension ".toml"`},
		{"no extension", write("catalog", `{}`), "unknown extension"},
		{"missing", filepath.Join(dir, "missing.json"), "no such file"},
		{"too big", write("big.json", strings.Repeat(" ", MaxFileBytes+1)), "larger than"},
		{"invalid names the file", write("bad.json", `{"deny":["a b"]}`), "bad.json: invalid catalog: deny[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if c == nil {
					t.Fatal("Load returned nil catalog")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Load: err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

// The example catalog documents every field; check that it sets every one,
// so a field added later without an example fails here.
func TestExampleCatalogSetsEveryField(t *testing.T) {
	c, err := Load("testdata/catalog.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(*c)
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Errorf("testdata/catalog.yaml does not set %s", v.Type().Field(i).Name)
		}
	}
	if ok, why := c.Allowed("numpy", "2.1.0"); !ok {
		t.Errorf("numpy 2.1.0 not allowed by the example: %s", why)
	}
	if ok, _ := c.Allowed("paramiko", "3.0"); ok {
		t.Error("paramiko allowed by the example, want denylisted")
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok, why := c.Allowed("six", "1.16.0"); ok || why != "six 1.16.0 is not on the allowlist" {
		t.Errorf("Default().Allowed = %v, %q", ok, why)
	}
}
