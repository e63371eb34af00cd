package wheel

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// entryPoint is one console_scripts or gui_scripts entry.
type entryPoint struct{ name, value string }

// entryPoints are a wheel's script entry points, each group in file order with later
// duplicates replacing earlier ones (a Python dict, as pip builds it).
type entryPoints struct{ console, gui []entryPoint }

func (g *entryPoints) set(group *[]entryPoint, ep entryPoint) {
	for i := range *group {
		if (*group)[i].name == ep.name {
			(*group)[i].value = ep.value
			return
		}
	}
	*group = append(*group, ep)
}

func (g *entryPoints) has(name string) bool {
	for _, list := range [][]entryPoint{g.console, g.gui} {
		for _, ep := range list {
			if ep.name == name {
				return true
			}
		}
	}
	return false
}

// pyLineBreaks are the line boundaries of Python's str.splitlines.
const pyLineBreaks = "\n\r\v\f\x1c\x1d\x1e\u0085\u2028\u2029"

// pyStrip is Python's str.strip(): Unicode white space, including \x1c-\x1f.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f })
}

// parseEntryPoints parses entry_points.txt the way importlib.metadata does (which is
// what pip uses), keeping console_scripts and gui_scripts, and validates each entry the
// way pip's script maker would accept it, more strictly: the whole name and value must
// match, not just a part of them.
func parseEntryPoints(b []byte) (*entryPoints, error) {
	eps := &entryPoints{}
	if b == nil {
		return eps, nil
	}
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%w: not UTF-8", ErrBadWheel)
	}
	section, inSection := "", false
	lines := strings.FieldsFunc(string(b), func(r rune) bool { return strings.ContainsRune(pyLineBreaks, r) })
	for _, raw := range lines {
		line := pyStrip(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section, inSection = strings.Trim(line, "[]"), true
			continue
		}
		if !inSection {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%w: entry point line %q has no \"=\"", ErrBadWheel, line)
		}
		ep := entryPoint{pyStrip(name), pyStrip(value)}
		var group *[]entryPoint
		switch section {
		case "console_scripts":
			group = &eps.console
		case "gui_scripts":
			group = &eps.gui
		default:
			continue
		}
		if err := ep.check(); err != nil {
			return nil, err
		}
		eps.set(group, ep)
	}
	return eps, nil
}

var (
	// scriptNameRE is distlib's entry name, (\w|[-.+])+, with Python's Unicode \w.
	scriptNameRE = lazyre.New(`^[\p{L}\p{N}_.+-]+$`)
	// callableRE is distlib's callable with exactly one ":" (pip requires the
	// callable suffix) and optional extras in brackets.
	callableRE = lazyre.New(`^([\p{L}\p{N}_]+(?:\.[\p{L}\p{N}_]+)*):([\p{L}\p{N}_]+(?:\.[\p{L}\p{N}_]+)*)` +
		`\s*(?:\[\s*[\p{L}\p{N}_-]+(?:=[\p{L}\p{N}_]+)?(?:,\s*[\p{L}\p{N}_]+(?:=[\p{L}\p{N}_]+)?)*\s*\])?$`)
)

func (ep entryPoint) check() error {
	if !scriptNameRE().MatchString(ep.name) || ep.name == "." || ep.name == ".." || len(ep.name) > 255 {
		return fmt.Errorf("%w: entry point name %q is not a safe script name", ErrBadWheel, ep.name)
	}
	if !callableRE().MatchString(ep.value) {
		return fmt.Errorf("%w: entry point %s = %q: want module.path:callable.path [extras]", ErrBadWheel, ep.name, ep.value)
	}
	return nil
}

// script is a generated entry point script.
type script struct{ name, body string }

// scriptText is distlib's SCRIPT_TEMPLATE as pip 23.2 fills it.
func scriptText(value string) string {
	m := callableRE().FindStringSubmatch(value)
	module, fn := m[1], m[2]
	importName, _, _ := strings.Cut(fn, ".")
	return "# -*- coding: utf-8 -*-\n" +
		"import re\n" +
		"import sys\n" +
		"from " + module + " import " + importName + "\n" +
		"if __name__ == '__main__':\n" +
		"    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n" +
		"    sys.exit(" + fn + "())\n"
}

var (
	versionedPipRE = lazyre.New(`^pip(\d+(\.\d+)?)?$`)
	versionedEIRE  = lazyre.New(`^easy_install(-\d+\.\d+)?$`)
)

// scripts lists the scripts pip generates for eps: console scripts (with pip's special
// names for pip and easy_install when pyVersion is set), then GUI scripts; a later
// script of the same name replaces an earlier one, as pip's clobbering maker does.
func (eps *entryPoints) scripts(pyVersion string) []script {
	var specs []entryPoint
	console := append([]entryPoint(nil), eps.console...)
	take := func(name string, drop *regexp.Regexp) (string, bool) {
		var value string
		found := false
		kept := console[:0:0]
		for _, ep := range console {
			if ep.name == name {
				value, found = ep.value, true
				continue
			}
			kept = append(kept, ep)
		}
		console = kept
		if found {
			kept = console[:0:0]
			for _, ep := range console {
				if !drop.MatchString(ep.name) {
					kept = append(kept, ep)
				}
			}
			console = kept
		}
		return value, found
	}
	if pyVersion != "" {
		major, _, _ := strings.Cut(pyVersion, ".")
		if v, ok := take("pip", versionedPipRE()); ok {
			specs = append(specs, entryPoint{"pip", v}, entryPoint{"pip" + major, v}, entryPoint{"pip" + pyVersion, v})
		}
		if v, ok := take("easy_install", versionedEIRE()); ok {
			specs = append(specs, entryPoint{"easy_install", v}, entryPoint{"easy_install-" + pyVersion, v})
		}
	}
	specs = append(specs, console...)
	specs = append(specs, eps.gui...)
	var out []script
	index := map[string]int{}
	for _, ep := range specs {
		s := script{ep.name, scriptText(ep.value)}
		if i, ok := index[ep.name]; ok {
			out[i] = s
			continue
		}
		index[ep.name] = len(out)
		out = append(out, s)
	}
	return out
}

// isEntryPointWrapper is pip's test for a setuptools-generated wrapper in .data/scripts
// (EP, EP.exe, EP-script.py, EP.pya), which pip does not install.
func (eps *entryPoints) isEntryPointWrapper(base string) bool {
	l := strings.ToLower(base)
	match := base
	switch {
	case strings.HasSuffix(l, ".exe"), strings.HasSuffix(l, ".pya"):
		match = base[:len(base)-4]
	case strings.HasSuffix(l, "-script.py"):
		match = base[:len(base)-10]
	}
	return eps.has(match)
}

// copyScript copies a .data/scripts file, replacing a first line that starts with
// "#!python" (also "#!pythonw", "#!python3 -u" ...) by shebang, exactly as pip's
// fix_script does. It returns the bytes written.
func copyScript(w io.Writer, r io.Reader, shebang string) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(len("#!python"))
	var n int64
	if bytes.Equal(head, []byte("#!python")) {
		for { // discard the first line, however long
			_, err := br.ReadSlice('\n')
			if err == nil || err == io.EOF {
				break
			}
			if err != bufio.ErrBufferFull {
				return 0, err
			}
		}
		m, err := io.WriteString(w, shebang+"\n")
		if err != nil {
			return 0, err
		}
		n = int64(m)
	}
	m, err := br.WriteTo(w)
	return n + m, err
}
