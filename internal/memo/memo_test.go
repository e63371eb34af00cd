package memo

import (
	"strconv"
	"testing"
	"time"
)

func TestBounded(t *testing.T) {
	const max = 64
	c := New[int](max, 0)
	for i := range max * 3 {
		c.Put(strconv.Itoa(i), i)
		if n := c.Len(); n > max {
			t.Fatalf("after %d puts the cache holds %d, want at most %d", i+1, n, max)
		}
	}
	last := strconv.Itoa(max*3 - 1)
	if v, ok := c.Get(last); !ok || v != max*3-1 {
		t.Errorf("the newest entry: %d, %v; want it kept", v, ok)
	}
	c.Forget(last)
	if _, ok := c.Get(last); ok {
		t.Error("a forgotten entry is still there")
	}
}

func TestExpires(t *testing.T) {
	c := New[string](8, time.Nanosecond)
	c.Put("k", "v")
	deadline := time.Now().Add(time.Second)
	for {
		if _, ok := c.Get("k"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an entry with a 1ns TTL is still there after a second")
		}
	}
	never := New[string](8, 0)
	never.Put("k", "v")
	if v, ok := never.Get("k"); !ok || v != "v" {
		t.Errorf("TTL 0: %q, %v; want the entry kept", v, ok)
	}
}
