//go:build !lean

package cli

import (
	"fmt"
	"time"

	"github.com/pylayer/pylayer/registry/cache"
)

// The JSON shapes of what the host cache reports, snake_case like every other --json
// output: the cache's own types are Go values, not a wire format.

type cacheEntryJSON struct {
	Digest   string    `json:"digest"`
	Root     string    `json:"root"`
	Bytes    int64     `json:"bytes"`
	Trees    []string  `json:"trees"`
	Refs     []string  `json:"refs"`
	Held     bool      `json:"held"`
	Packages []string  `json:"packages"`
	LastUsed time.Time `json:"last_used"`
	Problem  string    `json:"problem,omitempty"`
}

func entriesJSON(es []cache.Entry) []cacheEntryJSON {
	out := make([]cacheEntryJSON, 0, len(es))
	for _, e := range es {
		j := cacheEntryJSON{Digest: e.Digest.String(), Root: e.Root, Bytes: e.Bytes, Refs: nonNil(e.Refs),
			Held: e.Held, Packages: nonNil(e.Packages), LastUsed: e.LastUsed, Problem: e.Problem, Trees: strs(e.Trees)}
		out = append(out, j)
	}
	return out
}

type gcJSON struct {
	RemovedLayers []string `json:"removed_layers"`
	RemovedTrees  []string `json:"removed_trees"`
	FreedBytes    int64    `json:"freed_bytes"`
	Kept          []string `json:"kept"`
}

func gcReportJSON(r cache.GCReport) gcJSON {
	return gcJSON{RemovedLayers: strs(r.RemovedLayers), RemovedTrees: strs(r.RemovedTrees), FreedBytes: r.FreedBytes, Kept: strs(r.Kept)}
}

// strs is the String of each of vs, never nil (JSON [] rather than null).
func strs[T fmt.Stringer](vs []T) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.String())
	}
	return out
}

type doctorCacheJSON struct {
	Checked  int      `json:"checked"`
	Bad      []string `json:"bad"`
	Repaired []string `json:"repaired"`
}

func doctorCache(r cache.DoctorReport) doctorCacheJSON {
	return doctorCacheJSON{Checked: r.Checked, Bad: nonNil(r.Bad), Repaired: nonNil(r.Repaired)}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
