package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileBytes bounds the size of a catalog file; a policy file is a few
// kilobytes, and a bigger one is a mistake (or an attack on the parser).
const MaxFileBytes = 4 << 20

// Format is the syntax of a catalog file.
type Format int

const (
	JSON Format = iota + 1
	YAML
)

func (f Format) String() string {
	switch f {
	case JSON:
		return "JSON"
	case YAML:
		return "YAML"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatOf picks the format from a file name's extension: .json, or .yaml
// and .yml (case-insensitive).
func FormatOf(path string) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return JSON, nil
	case ".yaml", ".yml":
		return YAML, nil
	}
	return 0, fmt.Errorf("%w: %s: unknown extension %q; name the file .json, .yaml or .yml", ErrInvalid, path, filepath.Ext(path))
}

// Load reads and validates the catalog at path, JSON or YAML by extension.
// Decoding is strict: unknown or duplicate fields, a second document or
// trailing data are errors. Errors name the file and the field.
func Load(path string) (*Catalog, error) {
	f, err := FormatOf(path)
	if err != nil {
		return nil, err
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loading catalog: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("loading catalog %s: %w", path, err)
	}
	c, err := Parse(data, f)
	if err != nil {
		return nil, fmt.Errorf("loading catalog %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and validates a catalog, strictly (see Load).
func Parse(data []byte, f Format) (*Catalog, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxFileBytes)
	}
	var (
		c   *Catalog
		err error
	)
	switch f {
	case JSON:
		c, err = parseJSON(data)
	case YAML:
		c, err = parseYAML(data)
	default:
		return nil, fmt.Errorf("%w: unknown format %v", ErrInvalid, f)
	}
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func parseYAML(data []byte) (*Catalog, error) {
	// First pass: exactly one document, and it is a mapping (not null, a
	// scalar or a list). Node.Decode has no KnownFields, hence a second
	// pass through a strict Decoder.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the YAML document is empty", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: decoding YAML: %v", ErrInvalid, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: decoding YAML: a catalog is one document, found more", ErrInvalid)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: decoding YAML: the catalog must be a mapping (base:, allow:, deny:, ...)", ErrInvalid)
	}
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Catalog
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: decoding YAML: %v", ErrInvalid, err)
	}
	return &c, nil
}

// The exact keys a JSON catalog may use. encoding/json alone would accept
// "DENY" for "deny" and let a repeated key silently replace the first.
var (
	topKeys  = map[string]bool{"base": true, "allow": true, "deny": true, "max_wheel_bytes": true, "max_layer_bytes": true, "native": true}
	ruleKeys = map[string]bool{"name": true, "spec": true}
)

func parseJSON(data []byte) (*Catalog, error) {
	if err := checkJSON(data); err != nil {
		return nil, fmt.Errorf("%w: decoding JSON: %v", ErrInvalid, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Catalog
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: decoding JSON: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: decoding JSON: trailing data after the catalog object", ErrInvalid)
	}
	return &c, nil
}

// checkJSON walks the document's tokens: the top level must be an object,
// no object may repeat a key, and the catalog and its allow rules may use
// only their own keys, spelled exactly.
func checkJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the document is empty")
		}
		return err
	}
	if tok != json.Delim('{') {
		return errors.New("the catalog must be a JSON object")
	}
	return walkObject(dec, "", topKeys, 1)
}

const maxJSONDepth = 64

// walkObject consumes an object whose '{' was read. keys, when non-nil, are
// the only keys allowed; path names the object in errors.
func walkObject(dec *json.Decoder, path string, keys map[string]bool, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%s: nested deeper than %d levels", orTop(path), maxJSONDepth)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		k := tok.(string) // object keys are always strings
		field := k
		if path != "" {
			field = path + "." + k
		}
		if seen[k] {
			return fmt.Errorf("%s: duplicate key", field)
		}
		seen[k] = true
		if keys != nil && !keys[k] {
			return fmt.Errorf("%s: unknown field", field)
		}
		var sub map[string]bool
		if path == "" && k == "allow" {
			sub = ruleKeys
		}
		if err := walkValue(dec, field, sub, depth); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// walkValue consumes one value. itemKeys, when non-nil, constrains the keys
// of objects that are items of this value (an array).
func walkValue(dec *json.Decoder, path string, itemKeys map[string]bool, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, path, nil, depth+1)
	case json.Delim('['):
		if depth+1 > maxJSONDepth {
			return fmt.Errorf("%s: nested deeper than %d levels", path, maxJSONDepth)
		}
		for i := 0; dec.More(); i++ {
			item := fmt.Sprintf("%s[%d]", path, i)
			if itemKeys == nil {
				if err := walkValue(dec, item, nil, depth+1); err != nil {
					return err
				}
				continue
			}
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			if tok != json.Delim('{') {
				return fmt.Errorf("%s: must be an object with \"name\" and optional \"spec\"", item)
			}
			if err := walkObject(dec, item, itemKeys, depth+2); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

func orTop(path string) string {
	if path == "" {
		return "catalog"
	}
	return path
}
