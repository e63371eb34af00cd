package sign

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadSigner(t *testing.T) {
	k := testKeys(t)
	ctx := context.Background()
	priv, err := os.ReadFile(k[0].priv)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(k[0].pub)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(priv, []byte("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")) {
		t.Fatalf("GenerateKeyPair wrote\n%s", priv)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	legacy := write("legacy.key", bytes.ReplaceAll(priv, []byte("SIGSTORE"), []byte("COSIGN")))
	cases := []struct {
		name     string
		path     string
		password func() ([]byte, error)
		env      *string
		wantErr  error // nil: loads
	}{
		{"right password", k[0].priv, staticPassword(testPassword), nil, nil},
		{"legacy COSIGN PEM type", legacy, staticPassword(testPassword), nil, nil},
		{"password from env", k[0].priv, nil, ptr(testPassword), nil},
		{"wrong password", k[0].priv, staticPassword("hunter2-wrong"), nil, ErrWrongPassword},
		{"wrong password from env", k[0].priv, nil, ptr("hunter2-wrong"), ErrWrongPassword},
		{"empty password", k[0].priv, staticPassword(""), nil, ErrWrongPassword},
		{"public key", k[0].pub, staticPassword(testPassword), nil, ErrInvalidKey},
		{"unencrypted key", write("plain.key", []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")), staticPassword(""), nil, ErrInvalidKey},
		{"not PEM", write("junk.key", []byte("hello")), staticPassword(""), nil, ErrInvalidKey},
		{"corrupt ciphertext", write("corrupt.key", []byte("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")), staticPassword(""), nil, ErrInvalidKey},
		{"too large", write("huge.key", bytes.Repeat([]byte("A"), maxKeyFileSize+1)), staticPassword(""), nil, ErrInvalidKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != nil {
				t.Setenv(PasswordEnv, *c.env)
			}
			s, err := LoadSigner(ctx, c.path, c.password)
			if c.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				v, err := ParseVerifier(pub, "pub")
				if err != nil {
					t.Fatal(err)
				}
				if id, _ := KeyID(s.Public()); id != v.KeyIDs()[0] {
					t.Fatalf("loaded key %s, want %s", id, v.KeyIDs()[0])
				}
				return
			}
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("got %v, want %v", err, c.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), testPassword) {
				t.Fatalf("error echoes the password: %v", err)
			}
		})
	}
	t.Run("unset env", func(t *testing.T) {
		t.Setenv(PasswordEnv, "")
		os.Unsetenv(PasswordEnv)
		if _, err := LoadSigner(ctx, k[0].priv, nil); err == nil || !strings.Contains(err.Error(), PasswordEnv) {
			t.Fatalf("got %v, want an error naming %s", err, PasswordEnv)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if _, err := LoadSigner(ctx, filepath.Join(dir, "nope.key"), nil); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("got %v", err)
		}
	})
}

func ptr(s string) *string { return &s }

func TestParseVerifier(t *testing.T) {
	k := testKeys(t)
	a, _ := os.ReadFile(k[0].pub)
	b, _ := os.ReadFile(k[1].pub)
	priv, _ := os.ReadFile(k[0].priv)
	cases := []struct {
		name  string
		in    []byte
		nkeys int // 0: error
	}{
		{"one key", a, 1},
		{"two keys", append(append([]byte{}, a...), b...), 2},
		{"comment before", append([]byte("# ci key\n"), a...), 1},
		{"empty", nil, 0},
		{"private key", priv, 0},
		{"key then private key", append(append([]byte{}, a...), priv...), 0},
		{"trailing garbage", append(append([]byte{}, a...), "garbage"...), 0},
		{"bad DER", []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0},
		{"certificate", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0},
	}
	for _, c := range cases {
		v, err := ParseVerifier(c.in, "test.pub")
		if c.nkeys == 0 {
			if !errors.Is(err, ErrInvalidKey) {
				t.Errorf("%s: got %v, want %v", c.name, err, ErrInvalidKey)
			}
			continue
		}
		if err != nil || len(v.KeyIDs()) != c.nkeys {
			t.Errorf("%s: %v, %v", c.name, v.KeyIDs(), err)
		}
	}
	if v, err := LoadVerifier(context.Background(), k[0].pub, k[1].pub); err != nil || len(v.KeyIDs()) != 2 || v.KeyIDs()[0] != k[0].id {
		t.Errorf("LoadVerifier of two files: %v, %v", v.KeyIDs(), err)
	}
	if _, err := LoadVerifier(context.Background()); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("LoadVerifier of nothing: %v", err)
	}
	nv, err := NewVerifier("kms", k[1].signer)
	if err != nil || nv.KeyIDs()[0] != k[1].id {
		t.Errorf("NewVerifier: %v %v", nv.KeyIDs(), err)
	}
}
