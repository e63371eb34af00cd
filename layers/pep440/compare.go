package pep440

import "strings"

// Compare returns -1, 0 or +1 as v sorts before, equal to or after o under
// PEP 440 (packaging 21.3's _cmpkey): epoch, release with trailing zeros
// ignored, then pre-release (a dev-only release sorts before its
// pre-releases), post-release, dev release, and local segment (absent sorts
// first; alphanumeric parts before numeric ones; a shorter prefix first).
func (v Version) Compare(o Version) int {
	if c := cmpInt(v.epoch, o.epoch); c != 0 {
		return c
	}
	if c := cmpRelease(v.release, o.release); c != 0 {
		return c
	}
	if c := cmpPre(v, o); c != 0 {
		return c
	}
	// Absent post sorts first, absent dev sorts last; -1 encodes absence.
	if c := cmpInt(v.post, o.post); c != 0 {
		return c
	}
	if c := cmpDev(v.dev, o.dev); c != 0 {
		return c
	}
	return cmpLocal(v.local, o.local)
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func trimZeros(r []int) []int {
	for len(r) > 0 && r[len(r)-1] == 0 {
		r = r[:len(r)-1]
	}
	return r
}

func cmpRelease(a, b []int) int {
	a, b = trimZeros(a), trimZeros(b)
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := cmpInt(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmpInt(len(a), len(b))
}

// preRank maps the pre key to NegativeInfinity (0, dev-only), a real
// pre-release (1) or Infinity (2, final).
func preRank(v Version) int {
	switch {
	case v.preL == "" && v.post < 0 && v.dev >= 0:
		return 0
	case v.preL == "":
		return 2
	}
	return 1
}

func cmpPre(v, o Version) int {
	rv, ro := preRank(v), preRank(o)
	if rv != ro || rv != 1 {
		return cmpInt(rv, ro)
	}
	if c := strings.Compare(v.preL, o.preL); c != 0 {
		return c
	}
	return cmpInt(v.preN, o.preN)
}

func cmpDev(a, b int) int {
	switch {
	case a < 0 && b < 0:
		return 0
	case a < 0:
		return 1
	case b < 0:
		return -1
	}
	return cmpInt(a, b)
}

func cmpLocal(a, b []localPart) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		switch {
		case x.num && y.num:
			if c := cmpInt(len(x.s), len(y.s)); c != 0 {
				return c
			}
			if c := strings.Compare(x.s, y.s); c != 0 {
				return c
			}
		case x.num:
			return 1
		case y.num:
			return -1
		default:
			if c := strings.Compare(x.s, y.s); c != 0 {
				return c
			}
		}
	}
	return cmpInt(len(a), len(b))
}
