package target

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestRank(t *testing.T) {
	tg := mustFromFlags(t, "3.11", "manylinux_2_28_x86_64")
	n := len(tg.Tags())
	for _, tc := range []struct {
		tag  Tag
		want int
	}{
		{Tag{"cp311", "cp311", "manylinux_2_28_x86_64"}, 0},
		{Tag{"cp311", "cp311", "manylinux_2_27_x86_64"}, 1},
		{Tag{"CP311", "CP311", "MANYLINUX_2_28_X86_64"}, 0},
		{Tag{"py3", "none", "any"}, n - 12},
		{Tag{"py30", "none", "any"}, n - 1},
		{Tag{"cp311", "none", "any"}, n - 14},
		{Tag{"cp311", "cp311", "manylinux_2_29_x86_64"}, -1},
		{Tag{"cp312", "cp312", "manylinux_2_17_x86_64"}, -1},
		{Tag{"cp311", "cp311", "linux_x86_64"}, -1},
		{Tag{"cp311", "cp311d", "manylinux_2_28_x86_64"}, -1},
		{Tag{}, -1},
	} {
		if got := tg.Rank(tc.tag); got != tc.want {
			t.Errorf("Rank(%s) = %d, want %d", tc.tag, got, tc.want)
		}
	}
	abi3 := tg.Rank(Tag{"cp38", "abi3", "manylinux2014_x86_64"})
	if abi3 < 0 || abi3 < tg.Rank(Tag{"cp311", "none", "manylinux1_x86_64"}) {
		t.Errorf("cp38-abi3 rank %d: want after cp311-none-*", abi3)
	}
}

func TestRankDebugABI(t *testing.T) {
	tg := mustFromFlags(t, "3.11", "linux_x86_64")
	tg.ABI = "cp311d"
	if tg.Rank(Tag{"cp311", "cp311d", "linux_x86_64"}) != 0 || tg.Rank(Tag{"cp311", "cp311", "linux_x86_64"}) != 1 {
		t.Fatalf("debug target tags start %v", tg.Tags()[:3])
	}
}

func TestRankFollowsMutation(t *testing.T) {
	tg := mustFromFlags(t, "3.11", "manylinux_2_28_x86_64")
	tag := Tag{"cp311", "cp311", "manylinux_2_28_x86_64"}
	if tg.Rank(tag) != 0 {
		t.Fatal("want rank 0")
	}
	tg.Platforms = []string{"manylinux_2_27_x86_64"}
	if got := tg.Rank(tag); got != -1 {
		t.Fatalf("after changing platforms Rank = %d, want -1 (stale cache)", got)
	}
	tg.Python, tg.ABI = "3.12", "cp312"
	if got := tg.Rank(Tag{"cp312", "cp312", "manylinux_2_27_x86_64"}); got != 0 {
		t.Fatalf("after changing python Rank = %d, want 0", got)
	}
	if got := (Target{}).Rank(tag); got != -1 || len((Target{}).Tags()) != 0 {
		t.Fatalf("zero target Rank = %d", got)
	}
}

func TestRankConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tg := mustFromFlags(t, "3."+itoa(8+i), "manylinux_2_17_x86_64")
			for j := 0; j < 200; j++ {
				if tg.Rank(Tag{"py3", "none", "any"}) < 0 {
					t.Error("py3-none-any unsupported")
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestBestRank(t *testing.T) {
	tg := mustFromFlags(t, "3.11", "manylinux_2_28_x86_64")
	parse := func(s string) []Tag {
		tags, err := ParseTagSet(s)
		if err != nil {
			t.Fatal(err)
		}
		return tags
	}
	if got := tg.BestRank(parse("cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64")); got != tg.Rank(Tag{"cp311", "cp311", "manylinux_2_17_x86_64"}) {
		t.Errorf("BestRank = %d", got)
	}
	if got := tg.BestRank(parse("cp311-cp311-musllinux_1_1_x86_64.win_amd64")); got != -1 {
		t.Errorf("BestRank unsupported = %d", got)
	}
	if got := tg.BestRank(nil); got != -1 {
		t.Errorf("BestRank(nil) = %d", got)
	}
}

func TestTagsIsCopy(t *testing.T) {
	tg := mustFromFlags(t, "3.11", "linux_x86_64")
	a := tg.Tags()
	a[0] = Tag{"x", "y", "z"}
	if tg.Tags()[0].String() != "cp311-cp311-linux_x86_64" {
		t.Fatal("Tags shares its backing array")
	}
}

func TestParseTagSet(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: space-separated tags, or the error text
		err      error
	}{
		{"py3-none-any", "py3-none-any", nil},
		{"py2.py3-none-any", "py2-none-any py3-none-any", nil},
		{"cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64", "cp311-cp311-manylinux_2_17_x86_64 cp311-cp311-manylinux2014_x86_64", nil},
		{"PY3-None-Any", "py3-none-any", nil},
		{"py3.PY3-none-any", "py3-none-any", nil},
		{"py3-none", "want INTERPRETER-ABI-PLATFORM", ErrInvalidTag},
		{"py3-none-any-x", "want INTERPRETER-ABI-PLATFORM", ErrInvalidTag},
		{"py3--any", "empty component", ErrInvalidTag},
		{"py3.-none-any", "empty component", ErrInvalidTag},
		{"py3-none-any/../x", "not allowed", ErrInvalidTag},
		{"py3-none-an y", "not allowed", ErrInvalidTag},
		{strings.Repeat("a.", 40) + "a-" + strings.Repeat("b.", 40) + "b-any", "more than 1024", ErrInvalidTag},
	} {
		got, err := ParseTagSet(tc.in)
		if tc.err != nil {
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseTagSet(%q) error %v, want %q", tc.in, err, tc.want)
			}
			continue
		}
		if err != nil || strings.Join(tagStrings(got), " ") != tc.want {
			t.Errorf("ParseTagSet(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func BenchmarkRank(b *testing.B) {
	tg := mustFromFlags(b, "3.11", "manylinux_2_28_x86_64")
	hit := Tag{"py3", "none", "any"}
	miss := Tag{"cp311", "cp311", "win_amd64"}
	b.ReportAllocs()
	for b.Loop() {
		tg.Rank(hit)
		tg.Rank(miss)
	}
}
