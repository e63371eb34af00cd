package target

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// ErrInvalidTag: a wheel tag set that is malformed.
var ErrInvalidTag = errors.New("invalid tag")

// maxTagSet bounds the expansion of one compressed tag set.
const maxTagSet = 1024

// Tag is one PEP 425 tag triple, lower case.
type Tag struct{ Interpreter, ABI, Platform string }

// String returns the tag as "cp311-cp311-manylinux_2_28_x86_64".
func (t Tag) String() string { return t.Interpreter + "-" + t.ABI + "-" + t.Platform }

// ParseTagSet parses a (possibly compressed) PEP 425 tag set such as
// "py2.py3-none-any" and returns its expansion in order, without duplicates.
// Like packaging it lower-cases; unlike packaging it rejects empty
// components and characters other than [a-z0-9_], and expansions of more
// than 1024 tags.
func ParseTagSet(s string) ([]Tag, error) {
	parts := strings.Split(s, "-")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%w %q: want INTERPRETER-ABI-PLATFORM, e.g. py3-none-any", ErrInvalidTag, s)
	}
	var sets [3][]string
	n := 1
	for i, p := range parts {
		for _, c := range strings.Split(strings.ToLower(p), ".") {
			if c == "" {
				return nil, fmt.Errorf("%w %q: empty component", ErrInvalidTag, s)
			}
			for j := 0; j < len(c); j++ {
				if b := c[j]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_') {
					return nil, fmt.Errorf("%w %q: character %q not allowed", ErrInvalidTag, s, b)
				}
			}
			sets[i] = append(sets[i], c)
		}
		n *= len(sets[i])
		if n > maxTagSet {
			return nil, fmt.Errorf("%w %q: expands to more than %d tags", ErrInvalidTag, s, maxTagSet)
		}
	}
	out := make([]Tag, 0, n)
	seen := make(map[Tag]bool, n)
	for _, in := range sets[0] {
		for _, abi := range sets[1] {
			for _, pl := range sets[2] {
				t := Tag{in, abi, pl}
				if !seen[t] {
					seen[t] = true
					out = append(out, t)
				}
			}
		}
	}
	return out, nil
}

// Tags returns the tags t supports, most preferred first. For a probed
// interpreter this is exactly pip 23's compatibility_tags.get_supported(),
// that is packaging 21.3's sys_tags() plus "cp3X-none-any" (which sys_tags
// omits but pip adds): cpython_tags(version, abis, platforms) followed by
// compatible_tags(version, "cp3X", platforms). The result is a fresh slice.
// Tags of a Target that does not pass Validate may be empty.
func (t Target) Tags() []Tag {
	return slices.Clone(t.index().tags)
}

// Rank returns tag's index in Tags(), or -1 if t does not support it. It is
// cheap: the ranking is computed once per distinct target and cached.
func (t Target) Rank(tag Tag) int {
	idx := t.index()
	if r, ok := idx.rank[tag]; ok {
		return r
	}
	if lower := (Tag{strings.ToLower(tag.Interpreter), strings.ToLower(tag.ABI), strings.ToLower(tag.Platform)}); lower != tag {
		if r, ok := idx.rank[lower]; ok {
			return r
		}
	}
	return -1
}

// BestRank returns the lowest Rank among tags, or -1 if none is supported.
func (t Target) BestRank(tags []Tag) int {
	best := -1
	for _, tag := range tags {
		if r := t.Rank(tag); r >= 0 && (best < 0 || r < best) {
			best = r
		}
	}
	return best
}

// tagIndex is the immutable ranking of one (Python, ABI, Platforms).
type tagIndex struct {
	python, abi string
	platforms   []string
	tags        []Tag
	rank        map[Tag]int
}

func (x *tagIndex) matches(t Target) bool {
	return x.python == t.Python && x.abi == t.ABI && slices.Equal(x.platforms, t.Platforms)
}

// indexCache holds the most recently used indexes, newest first. It is a
// pure memo (copy-on-write, lock-free reads); Target stays a plain value.
var indexCache atomic.Pointer[[]*tagIndex]

const indexCacheSize = 16

func (t Target) index() *tagIndex {
	if p := indexCache.Load(); p != nil {
		for _, x := range *p {
			if x.matches(t) {
				return x
			}
		}
	}
	x := buildIndex(t)
	for {
		old := indexCache.Load()
		var next []*tagIndex
		next = append(next, x)
		if old != nil {
			next = append(next, (*old)[:min(len(*old), indexCacheSize-1)]...)
		}
		if indexCache.CompareAndSwap(old, &next) {
			return x
		}
	}
}

func buildIndex(t Target) *tagIndex {
	x := &tagIndex{python: t.Python, abi: t.ABI, platforms: slices.Clone(t.Platforms)}
	minor, ok := t.minor()
	if ok {
		x.tags = supportedTags(minor, t.ABI, x.platforms)
	}
	x.rank = make(map[Tag]int, len(x.tags))
	for i, tag := range x.tags {
		if _, dup := x.rank[tag]; !dup {
			x.rank[tag] = i
		}
	}
	return x
}

// supportedTags mirrors pip 23 get_supported() for CPython 3.minor with the
// given ABI ("cp3X" or debug "cp3Xd", which also loads "cp3X") and platforms.
func supportedTags(minor int, abi string, platforms []string) []Tag {
	nodot := "3" + strconv.Itoa(minor)
	interp := "cp" + nodot
	abis := []string{abi}
	if abi == interp+"d" { // packaging._cpython_abis: debug builds load normal extensions (3.8+)
		abis = append(abis, interp)
	}
	var out []Tag
	// cpython_tags
	for _, a := range abis {
		for _, p := range platforms {
			out = append(out, Tag{interp, a, p})
		}
	}
	for _, p := range platforms {
		out = append(out, Tag{interp, "abi3", p})
	}
	for _, p := range platforms {
		out = append(out, Tag{interp, "none", p})
	}
	for m := minor - 1; m > 1; m-- {
		for _, p := range platforms {
			out = append(out, Tag{"cp3" + strconv.Itoa(m), "abi3", p})
		}
	}
	// compatible_tags
	pys := []string{"py" + nodot, "py3"}
	for m := minor - 1; m >= 0; m-- {
		pys = append(pys, "py3"+strconv.Itoa(m))
	}
	for _, v := range pys {
		for _, p := range platforms {
			out = append(out, Tag{v, "none", p})
		}
	}
	out = append(out, Tag{interp, "none", "any"})
	for _, v := range pys {
		out = append(out, Tag{v, "none", "any"})
	}
	return out
}
