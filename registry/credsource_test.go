package registry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCredentialSource: an authentication error names where the credentials came from:
// the host's credential helper, the credential store, or the config file.
func TestCredentialSource(t *testing.T) {
	for _, tc := range []struct{ name, config, want string }{
		{"helper for the host", `{"credHelpers": {"reg.example:5000": "pass"}, "credsStore": "desktop"}`, "the credential helper docker-credential-pass (credHelpers in "},
		{"store", `{"credHelpers": {"other.example": "pass"}, "credsStore": "desktop"}`, "the credential store docker-credential-desktop (credsStore in "},
		{"file", `{"auths": {"reg.example:5000": {"auth": "eDp5"}}}`, filepath.Join("DIR", "config.json")},
		{"no file", "", filepath.Join("DIR", "config.json") + " (which does not exist)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.config != "" {
				if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("DOCKER_CONFIG", dir)
			got := credentialSource("reg.example:5000", true)
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			if !strings.HasPrefix(got, want) {
				t.Errorf("credentialSource = %q, want it to start with %q", got, want)
			}
			if strings.Contains(got, "eDp5") {
				t.Errorf("credentialSource quotes a credential: %q", got)
			}
		})
	}
	if got := credentialSource("reg.example:5000", false); got != "the configured keychain" {
		t.Errorf("a custom keychain: %q", got)
	}
}
