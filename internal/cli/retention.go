//go:build !lean

package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// retention is a --audit-retention value: whole days ("90d"), a Go duration ("720h"), or
// "off" / "0" for no pruning.
type retention time.Duration

func (r *retention) String() string {
	d := time.Duration(*r)
	switch {
	case d == 0:
		return "off"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

func (r *retention) Set(v string) error {
	if v == "off" || v == "0" || v == "" {
		*r = 0
		return nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want whole days such as 90d, a duration such as 720h, or off", v)
		}
		*r = retention(time.Duration(n) * 24 * time.Hour)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q: want whole days such as 90d, a duration such as 720h, or off", v)
	}
	*r = retention(d)
	return nil
}

func (r *retention) Type() string { return "retention" }
