package pep508

import (
	"fmt"
	"strings"

	"github.com/pylayer/pylayer/layers/pep440"
)

// Evaluate reports whether the marker holds in env with the given extra
// ("" when no extra is being installed, as pip does). A nil marker is
// always true. A marker that Eval rejects with an error is false.
func (m *Marker) Evaluate(env Environment, extra string) bool {
	ok, err := m.Eval(env, extra)
	return err == nil && ok
}

// Eval is Evaluate with packaging's exceptions as errors:
// ErrUndefinedEnvironmentName when env lacks a variable the marker uses,
// ErrUndefinedComparison for operators that mean nothing for their
// operands (e.g. ~= between non-versions). Like packaging it evaluates
// every comparison (no short-circuit), so errors do not depend on the
// values.
//
// Comparisons follow packaging 26.2: for the version variables
// (python_version, python_full_version, implementation_version,
// platform_release), if `op + right-hand side` is a valid PEP 440 specifier,
// the left-hand side is tested with it, pre-releases admitted
// (python_full_version "3.11.0a5" satisfies > "3.6.2"); a left side that is
// no PEP 440 version then matches only "===". Otherwise "in" is substring,
// "==" and "!=" compare strings, "<=" and ">=" are string equality and "<"
// and ">" are false. A python_full_version ending in "+" (an untagged
// CPython build) is read with "local" appended, so "3.11.1+" is a version.
// When one side is the extra variable, both sides are normalized with
// NormalizeName.
func (m *Marker) Eval(env Environment, extra string) (bool, error) {
	if m == nil {
		return true, nil
	}
	return evalItems(m.items, env, extra)
}

func evalItems(items []item, env Environment, extra string) (bool, error) {
	groups := [][]bool{{}}
	for _, it := range items {
		var v bool
		var err error
		switch {
		case it.boolop == "or":
			groups = append(groups, nil)
			continue
		case it.boolop == "and":
			continue
		case it.cmp != nil:
			v, err = it.cmp.eval(env, extra)
		default:
			v, err = evalItems(it.group, env, extra)
		}
		if err != nil {
			return false, err
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], v)
	}
	for _, g := range groups {
		all := true
		for _, v := range g {
			all = all && v
		}
		if all {
			return true, nil
		}
	}
	return false, nil
}

func lookup(env Environment, extra, name string) (string, error) {
	if name == "extra" {
		return extra, nil
	}
	if v, ok := env[name]; ok {
		if name == "python_full_version" && strings.HasSuffix(v, "+") {
			v += "local"
		}
		return v, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUndefinedEnvironmentName, name)
}

// eval mirrors packaging's _evaluate_markers: the environment supplies the
// left side if it is a variable, else the right side (even a quoted one).
func (c *comparison) eval(env Environment, extra string) (bool, error) {
	var key, l, r string
	var err error
	if c.l.isVar {
		key, r = c.l.s, c.r.s
		l, err = lookup(env, extra, key)
	} else {
		key, l = c.r.s, c.l.s
		r, err = lookup(env, extra, key)
	}
	if err != nil {
		return false, err
	}
	if key == "extra" {
		l, r = NormalizeName(l), NormalizeName(r)
	}
	return evalOp(key, l, c.op, r)
}

// versionKeys are packaging 26.2's MARKERS_REQUIRING_VERSION.
var versionKeys = map[string]bool{"implementation_version": true, "platform_release": true,
	"python_full_version": true, "python_version": true}

func evalOp(key, l, op, r string) (bool, error) {
	if versionKeys[key] {
		spec := pep440.TrimSpace(op + r)
		if strings.HasPrefix(spec, "===") {
			if v := pep440.TrimSpace(spec[3:]); v != "" && !strings.ContainsFunc(v, func(c rune) bool { return pep440.IsSpace(c) || c == ';' || c == ')' }) {
				return pyLower(l) == pyLower(v), nil
			}
		} else if s, err := pep440.ParseSpecifier(spec); err == nil {
			v, err := pep440.Parse(l)
			return err == nil && s.Contains(v, true), nil
		}
	}
	switch op {
	case "in":
		return strings.Contains(r, l), nil
	case "not in":
		return !strings.Contains(r, l), nil
	case "==", "<=", ">=":
		return l == r, nil
	case "!=":
		return l != r, nil
	case "<", ">":
		return false, nil
	}
	return false, fmt.Errorf("%w: %q %s %q", ErrUndefinedComparison, l, op, r)
}

// pyLower approximates Python's str.lower: Go's simple mapping plus the one
// unconditional multi-rune lowering (U+0130).
func pyLower(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "\u0130", "i\u0307"))
}
