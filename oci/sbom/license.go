package sbom

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// NoAssertion is SPDX's value for what the document makes no claim about.
const NoAssertion = "NOASSERTION"

// knownLicenses are the SPDX license list identifiers a free-text License field is
// taken for as it is (matched ignoring case, written in the list's case): the licenses
// Python packages use, and the deprecated short forms (GPL-2.0, LGPL-3.0+ ...) still on
// the list. Any other text becomes a LicenseRef with the text kept.
var knownLicenses = canonicalCase(
	"0BSD", "AFL-2.1", "AFL-3.0", "AGPL-1.0", "AGPL-3.0", "AGPL-3.0-only", "AGPL-3.0-or-later",
	"Apache-1.0", "Apache-1.1", "Apache-2.0", "APSL-2.0", "Artistic-1.0", "Artistic-2.0",
	"Beerware", "BlueOak-1.0.0", "BSD-1-Clause", "BSD-2-Clause", "BSD-2-Clause-Patent",
	"BSD-3-Clause", "BSD-3-Clause-Clear", "BSD-4-Clause", "BSL-1.0", "bzip2-1.0.6",
	"CC-BY-3.0", "CC-BY-4.0", "CC-BY-SA-3.0", "CC-BY-SA-4.0", "CC0-1.0", "CDDL-1.0", "CDDL-1.1",
	"CECILL-2.1", "CECILL-B", "CECILL-C", "CNRI-Python", "CNRI-Python-GPL-Compatible", "curl",
	"ECL-2.0", "EPL-1.0", "EPL-2.0", "EUPL-1.1", "EUPL-1.2", "FSFAP", "FTL",
	"GPL-1.0", "GPL-1.0+", "GPL-1.0-only", "GPL-1.0-or-later", "GPL-2.0", "GPL-2.0+",
	"GPL-2.0-only", "GPL-2.0-or-later", "GPL-3.0", "GPL-3.0+", "GPL-3.0-only", "GPL-3.0-or-later",
	"HPND", "ICU", "IJG", "Imlib2", "Info-ZIP", "Intel", "IPA", "ISC", "JSON",
	"LGPL-2.0", "LGPL-2.0+", "LGPL-2.0-only", "LGPL-2.0-or-later", "LGPL-2.1", "LGPL-2.1+",
	"LGPL-2.1-only", "LGPL-2.1-or-later", "LGPL-3.0", "LGPL-3.0+", "LGPL-3.0-only",
	"LGPL-3.0-or-later", "libpng-2.0", "Libpng", "libtiff", "LPPL-1.3c", "MIT", "MIT-0",
	"MIT-CMU", "MIT-Modern-Variant", "MPL-1.0", "MPL-1.1", "MPL-2.0",
	"MPL-2.0-no-copyleft-exception", "MS-PL", "MS-RL", "MulanPSL-2.0", "NCSA", "Nokia",
	"OFL-1.1", "OLDAP-2.8", "OpenSSL", "OSL-3.0", "PHP-3.0", "PHP-3.01", "PostgreSQL",
	"PSF-2.0", "Python-2.0", "Python-2.0.1", "QPL-1.0", "Ruby", "SGI-B-2.0", "Sleepycat",
	"SMLNJ", "TCL", "UCL-1.0", "Unicode-3.0", "Unicode-DFS-2015", "Unicode-DFS-2016",
	"Unlicense", "UPL-1.0", "Vim", "W3C", "WTFPL", "X11", "XFree86-1.1", "Zlib", "ZPL-2.0",
	"ZPL-2.1",
)

// licenseNames are the full names the SPDX license list gives its most used licenses: a
// License field that is exactly one of them (ignoring case) declares that license.
var licenseNames = map[string]string{
	"apache license 2.0":                          "Apache-2.0",
	"bsd 2-clause \"simplified\" license":         "BSD-2-Clause",
	"bsd 3-clause \"new\" or \"revised\" license": "BSD-3-Clause",
	"boost software license 1.0":                  "BSL-1.0",
	"creative commons zero v1.0 universal":        "CC0-1.0",
	"eclipse public license 2.0":                  "EPL-2.0",
	"isc license":                                 "ISC",
	"mit license":                                 "MIT",
	"mozilla public license 2.0":                  "MPL-2.0",
	"python software foundation license 2.0":      "PSF-2.0",
	"the unlicense":                               "Unlicense",
	"zlib license":                                "Zlib",
}

// knownExceptions are the SPDX license exceptions accepted after WITH in a License field.
var knownExceptions = canonicalCase(
	"Autoconf-exception-2.0", "Autoconf-exception-3.0", "Bison-exception-2.2",
	"Classpath-exception-2.0", "GCC-exception-2.0", "GCC-exception-3.1", "LLVM-exception",
	"OpenSSL-exception", "Qt-GPL-exception-1.0", "Qt-LGPL-exception-1.1", "Swift-exception",
	"Universal-FOSS-exception-1.0",
)

func canonicalCase(ids ...string) map[string]string {
	m := make(map[string]string, len(ids))
	for _, id := range ids {
		m[strings.ToLower(id)] = id
	}
	return m
}

// classifierLicenses maps the trove classifiers (after "License :: ") that name exactly
// one SPDX license to it. Classifiers that do not say which version or variant (Apache
// Software License, BSD License, GNU General Public License (GPL) ...) are not here:
// they become LicenseRefs that keep their text.
var classifierLicenses = map[string]string{
	"CC0 1.0 Universal (CC0 1.0) Public Domain Dedication":                            "CC0-1.0",
	"CeCILL-B Free Software License Agreement (CECILL-B)":                             "CECILL-B",
	"CeCILL-C Free Software License Agreement (CECILL-C)":                             "CECILL-C",
	"OSI Approved :: Blue Oak Model License (BlueOak-1.0.0)":                          "BlueOak-1.0.0",
	"OSI Approved :: Boost Software License 1.0 (BSL-1.0)":                            "BSL-1.0",
	"OSI Approved :: CEA CNRS Inria Logiciel Libre License, version 2.1 (CeCILL-2.1)": "CECILL-2.1",
	"OSI Approved :: Common Development and Distribution License 1.0 (CDDL-1.0)":      "CDDL-1.0",
	"OSI Approved :: Eclipse Public License 1.0 (EPL-1.0)":                            "EPL-1.0",
	"OSI Approved :: Eclipse Public License 2.0 (EPL-2.0)":                            "EPL-2.0",
	"OSI Approved :: Educational Community License, Version 2.0 (ECL-2.0)":            "ECL-2.0",
	"OSI Approved :: European Union Public Licence 1.0 (EUPL 1.0)":                    "EUPL-1.0",
	"OSI Approved :: European Union Public Licence 1.1 (EUPL 1.1)":                    "EUPL-1.1",
	"OSI Approved :: European Union Public Licence 1.2 (EUPL 1.2)":                    "EUPL-1.2",
	"OSI Approved :: GNU Affero General Public License v3":                            "AGPL-3.0-only",
	"OSI Approved :: GNU Affero General Public License v3 or later (AGPLv3+)":         "AGPL-3.0-or-later",
	"OSI Approved :: GNU General Public License v2 (GPLv2)":                           "GPL-2.0-only",
	"OSI Approved :: GNU General Public License v2 or later (GPLv2+)":                 "GPL-2.0-or-later",
	"OSI Approved :: GNU General Public License v3 (GPLv3)":                           "GPL-3.0-only",
	"OSI Approved :: GNU General Public License v3 or later (GPLv3+)":                 "GPL-3.0-or-later",
	"OSI Approved :: GNU Lesser General Public License v2 (LGPLv2)":                   "LGPL-2.0-only",
	"OSI Approved :: GNU Lesser General Public License v2 or later (LGPLv2+)":         "LGPL-2.0-or-later",
	"OSI Approved :: GNU Lesser General Public License v3 (LGPLv3)":                   "LGPL-3.0-only",
	"OSI Approved :: GNU Lesser General Public License v3 or later (LGPLv3+)":         "LGPL-3.0-or-later",
	"OSI Approved :: Historical Permission Notice and Disclaimer (HPND)":              "HPND",
	"OSI Approved :: ISC License (ISCL)":                                              "ISC",
	"OSI Approved :: MIT License":                                                     "MIT",
	"OSI Approved :: MIT No Attribution License (MIT-0)":                              "MIT-0",
	"OSI Approved :: MirOS License (MirOS)":                                           "MirOS",
	"OSI Approved :: Mozilla Public License 1.0 (MPL)":                                "MPL-1.0",
	"OSI Approved :: Mozilla Public License 1.1 (MPL 1.1)":                            "MPL-1.1",
	"OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)":                            "MPL-2.0",
	"OSI Approved :: Mulan Permissive Software License v2 (MulanPSL-2.0)":             "MulanPSL-2.0",
	"OSI Approved :: Open Software License 3.0 (OSL-3.0)":                             "OSL-3.0",
	"OSI Approved :: PostgreSQL License":                                              "PostgreSQL",
	"OSI Approved :: Python License (CNRI Python License)":                            "CNRI-Python",
	"OSI Approved :: Python Software Foundation License":                              "PSF-2.0",
	"OSI Approved :: SIL Open Font License 1.1 (OFL-1.1)":                             "OFL-1.1",
	"OSI Approved :: Sleepycat License":                                               "Sleepycat",
	"OSI Approved :: The Unlicense (Unlicense)":                                       "Unlicense",
	"OSI Approved :: Universal Permissive License (UPL)":                              "UPL-1.0",
	"OSI Approved :: University of Illinois/NCSA Open Source License":                 "NCSA",
	"OSI Approved :: W3C License":                                                     "W3C",
	"OSI Approved :: Zero-Clause BSD (0BSD)":                                          "0BSD",
	"OSI Approved :: zlib/libpng License":                                             "Zlib",
}

// expression is a parsed SPDX license expression.
type expression struct {
	text       string   // normalized: single spaces, upper case operators, listed ids in the list's case
	ids        []string // the license ids (LicenseRefs and DocumentRefs included), in order
	exceptions []string // the exception ids after WITH
}

// Bounds of the expressions parsed, so that hostile metadata cannot recurse deeply.
const (
	maxExpressionTokens = 256
	maxExpressionDepth  = 16
)

// parseExpression parses an SPDX license expression (SPDX 2.3 Annex D): license ids
// (with an optional "+"), LicenseRef-x and DocumentRef-x:LicenseRef-y, joined by AND and
// OR (AND binds tighter), WITH an exception, and parentheses. Operators may be upper or
// lower case. It reports false for anything else.
func parseExpression(s string) (expression, bool) {
	toks, ok := tokenize(s)
	if !ok || len(toks) == 0 || len(toks) > maxExpressionTokens {
		return expression{}, false
	}
	p := &exprParser{toks: toks}
	var b strings.Builder
	if !p.or(&b, 0) || p.i != len(toks) {
		return expression{}, false
	}
	return expression{text: b.String(), ids: p.ids, exceptions: p.exceptions}, true
}

func tokenize(s string) ([]string, bool) {
	var toks []string
	start := -1
	flush := func(i int) {
		if start >= 0 {
			toks = append(toks, s[start:i])
			start = -1
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			flush(i)
		case c == '(' || c == ')':
			flush(i)
			toks = append(toks, s[i:i+1])
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+' || c == ':':
			if start < 0 {
				start = i
			}
		default:
			return nil, false
		}
		if len(toks) > maxExpressionTokens {
			return nil, false
		}
	}
	flush(len(s))
	return toks, true
}

type exprParser struct {
	toks       []string
	i          int
	ids        []string
	exceptions []string
}

func (p *exprParser) peekOp(op string) bool {
	if p.i >= len(p.toks) {
		return false
	}
	t := p.toks[p.i]
	return t == op || t == strings.ToLower(op)
}

func (p *exprParser) or(b *strings.Builder, depth int) bool {
	if !p.and(b, depth) {
		return false
	}
	for p.peekOp("OR") {
		p.i++
		b.WriteString(" OR ")
		if !p.and(b, depth) {
			return false
		}
	}
	return true
}

func (p *exprParser) and(b *strings.Builder, depth int) bool {
	if !p.with(b, depth) {
		return false
	}
	for p.peekOp("AND") {
		p.i++
		b.WriteString(" AND ")
		if !p.with(b, depth) {
			return false
		}
	}
	return true
}

func (p *exprParser) with(b *strings.Builder, depth int) bool {
	if p.i >= len(p.toks) {
		return false
	}
	if p.toks[p.i] == "(" {
		if depth >= maxExpressionDepth {
			return false
		}
		p.i++
		b.WriteByte('(')
		if !p.or(b, depth+1) || p.i >= len(p.toks) || p.toks[p.i] != ")" {
			return false
		}
		p.i++
		b.WriteByte(')')
		return true
	}
	id, ok := licenseID(p.toks[p.i])
	if !ok {
		return false
	}
	p.i++
	p.ids = append(p.ids, id)
	b.WriteString(id)
	if p.peekOp("WITH") {
		p.i++
		if p.i >= len(p.toks) || !isIDString(p.toks[p.i]) {
			return false
		}
		exc := p.toks[p.i]
		if c, ok := knownExceptions[strings.ToLower(exc)]; ok {
			exc = c
		}
		p.i++
		p.exceptions = append(p.exceptions, exc)
		b.WriteString(" WITH " + exc)
	}
	return true
}

// licenseID checks one simple expression and writes a listed id in the list's case.
func licenseID(t string) (string, bool) {
	if isOperator(t) {
		return "", false
	}
	if doc, ref, ok := strings.Cut(t, ":"); ok {
		ok = strings.HasPrefix(doc, "DocumentRef-") && isIDString(doc[len("DocumentRef-"):]) &&
			strings.HasPrefix(ref, "LicenseRef-") && isIDString(ref[len("LicenseRef-"):])
		return t, ok
	}
	if strings.HasPrefix(t, "LicenseRef-") {
		return t, isIDString(t[len("LicenseRef-"):])
	}
	base, plus := strings.CutSuffix(t, "+")
	if !isIDString(base) {
		return "", false
	}
	if c, ok := knownLicenses[strings.ToLower(t)]; ok { // GPL-2.0+ is itself a listed id
		return c, true
	}
	if c, ok := knownLicenses[strings.ToLower(base)]; ok {
		base = c
	}
	if plus {
		base += "+"
	}
	return base, true
}

func isOperator(t string) bool {
	switch t {
	case "AND", "OR", "WITH", "and", "or", "with":
		return true
	}
	return false
}

// isIDString is SPDX's idstring: one or more of [A-Za-z0-9.-].
func isIDString(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// listed reports whether every license and exception of e is on the list this package
// knows (no LicenseRef, no DocumentRef, no unknown id).
func (e expression) listed() bool {
	for _, id := range e.ids {
		if _, ok := knownLicenses[strings.ToLower(id)]; !ok {
			if _, ok := knownLicenses[strings.ToLower(strings.TrimSuffix(id, "+"))]; !ok {
				return false
			}
		}
	}
	for _, x := range e.exceptions {
		if _, ok := knownExceptions[strings.ToLower(x)]; !ok {
			return false
		}
	}
	return true
}

// licenseRefs are the document's extracted licenses: LicenseRef ids and their texts.
type licenseRefs struct {
	text    map[string]string // id -> extracted text
	comment map[string]string // id -> comment
}

func newLicenseRefs() *licenseRefs {
	return &licenseRefs{text: map[string]string{}, comment: map[string]string{}}
}

// refPrefix begins the LicenseRefs this package makes up for license texts.
const refPrefix = "LicenseRef-pylayer-"

// add returns the LicenseRef of text, defining it on first use: refPrefix and the text
// itself for a short line ("LicenseRef-pylayer-BSD-License"), else refPrefix, "sha256-"
// and 16 hex digits of the text's sha256. One text always gets one id.
func (r *licenseRefs) add(text, comment string) string {
	id := refPrefix + refName(text)
	if t, ok := r.text[id]; ok && t != text || id == refPrefix {
		sum := sha256.Sum256([]byte(text))
		id = refPrefix + "sha256-" + hex.EncodeToString(sum[:8])
	}
	r.define(id, text, comment)
	return id
}

// define defines id unless it is defined already (the first definition stays).
func (r *licenseRefs) define(id, text, comment string) {
	if _, ok := r.text[id]; ok {
		return
	}
	r.text[id], r.comment[id] = text, comment
}

// refName is text as an idstring when it is one short line, else "".
func refName(text string) string {
	if len(text) > 64 || strings.ContainsAny(text, "\r\n") {
		return ""
	}
	var b strings.Builder
	dash := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteByte(c)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

// list is the extracted licenses, by id.
func (r *licenseRefs) list() []ExtractedLicense {
	out := make([]ExtractedLicense, 0, len(r.text))
	for id, t := range r.text {
		out = append(out, ExtractedLicense{LicenseID: id, ExtractedText: t, Comment: r.comment[id]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LicenseID < out[j].LicenseID })
	return out
}

// declared is a package's declared license and where it came from.
type declared struct {
	expr    string // an SPDX expression, or NoAssertion
	comment string
}

// declaredLicense reads a wheel's license from its core metadata: License-Expression
// (PEP 639), else License, else the License :: classifiers, else NoAssertion. Texts
// that are not SPDX expressions of listed licenses become LicenseRefs of refs.
func declaredLicense(m metadata, pkg string, refs *licenseRefs) declared {
	if v := strings.TrimSpace(m.get("License-Expression")); v != "" {
		if e, ok := parseExpression(v); ok {
			for _, id := range e.ids {
				if strings.HasPrefix(id, "LicenseRef-") {
					refs.define(id, licenseFilesText(m), fmt.Sprintf("named by the License-Expression of %s", pkg))
				}
			}
			return declared{e.text, "From the wheel's METADATA License-Expression."}
		}
		return declared{refs.add(v, "the License-Expression of "+pkg+", which is not an SPDX license expression"),
			"From the wheel's METADATA License-Expression, which is not an SPDX license expression: its text is kept."}
	}
	if v := strings.TrimSpace(m.get("License")); v != "" && v != "UNKNOWN" && v != "None" {
		if e, ok := parseExpression(v); ok && e.listed() {
			return declared{e.text, "From the wheel's METADATA License field."}
		}
		if id, ok := licenseNames[strings.ToLower(v)]; ok {
			return declared{id, "From the wheel's METADATA License field: the SPDX license list's name of " + id + "."}
		}
		return declared{refs.add(v, "the License field of "+pkg), "From the wheel's METADATA License field, a text that is not an SPDX license expression: it is kept as a LicenseRef."}
	}
	var classifiers []string
	for _, c := range m.all("Classifier") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(c), "License :: "); ok && rest != "" {
			classifiers = append(classifiers, rest)
		}
	}
	if len(classifiers) > 1 { // "OSI Approved" alone says less than any other
		classifiers = slicesDelete(classifiers, "OSI Approved")
	}
	var terms []string
	seen := map[string]bool{}
	for _, c := range classifiers {
		id, ok := classifierLicenses[c]
		if !ok {
			id = refs.add("License :: "+c, "a trove classifier that names no single SPDX license")
		}
		if !seen[id] {
			seen[id] = true
			terms = append(terms, id)
		}
	}
	switch len(terms) {
	case 0:
		return declared{NoAssertion, "The wheel's METADATA declares no license."}
	case 1:
		return declared{terms[0], "From the wheel's METADATA license classifier."}
	}
	return declared{strings.Join(terms, " AND "), "From the wheel's METADATA license classifiers, joined with AND: classifiers do not say whether they are alternatives."}
}

func slicesDelete(s []string, v string) []string {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// licenseFilesText is the extracted text of a LicenseRef a License-Expression names:
// the wheel carries the text in its license files, which the SBOM names.
func licenseFilesText(m metadata) string {
	files := m.all("License-File")
	if len(files) == 0 {
		return "The wheel's METADATA names this license in its License-Expression and lists no license file."
	}
	return "The wheel's METADATA names this license in its License-Expression; its text is in the wheel's license files: " + strings.Join(files, ", ") + "."
}
