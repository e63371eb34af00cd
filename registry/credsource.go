package registry

import (
	"os"
	"path/filepath"

	"github.com/docker/cli/cli/config"
)

// credentialSource says where the default keychain looks for host's credentials, in
// the words an error should use: the credential helper configured for host, the
// credential store, or the config file (named by its path). It reads the same file
// authn.DefaultKeychain reads ($DOCKER_CONFIG/config.json, else ~/.docker/config.json);
// it never reads a credential. A keychain other than the default is "the keychain".
func credentialSource(host string, defaultKeychain bool) string {
	if !defaultKeychain {
		return "the configured keychain"
	}
	dir := os.Getenv("DOCKER_CONFIG") // as the keychain reads it: config.Dir keeps its first answer
	if dir == "" {
		dir = config.Dir()
	}
	path := filepath.Join(dir, config.ConfigFileName)
	cf, err := config.Load(dir)
	if err != nil {
		return path
	}
	if h := cf.CredentialHelpers[host]; h != "" {
		return "the credential helper docker-credential-" + h + " (credHelpers in " + path + ")"
	}
	if cf.CredentialsStore != "" {
		return "the credential store docker-credential-" + cf.CredentialsStore + " (credsStore in " + path + ")"
	}
	if _, err := os.Stat(path); err != nil {
		return path + " (which does not exist)"
	}
	return path
}
