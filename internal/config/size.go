package config

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Size is a number of bytes, written as a number (1048576) or with a unit
// (B, KiB, MiB, GiB: "1MiB", "64KiB").
type Size int64

// sizeUnits are the units a Size may be written with, longest first.
var sizeUnits = []struct {
	suffix string
	n      int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}}

// MarshalJSON writes s as a number of bytes.
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(int64(s)) }

// UnmarshalJSON reads a number of bytes or a string with a unit.
func (s *Size) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 {
			return fmt.Errorf("size %d is negative", n)
		}
		*s = Size(n)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("size must be a number of bytes or a string like \"1MiB\", not %s", b)
	}
	num, mult := str, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(str, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(str, u.suffix)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("size %q: want a number of bytes, or one with a unit (B, KiB, MiB, GiB)", str)
	}
	*s = Size(n * mult)
	return nil
}

// String writes s with the largest unit that divides it.
func (s Size) String() string {
	for _, u := range []string{"GiB", "MiB", "KiB"} {
		for _, su := range sizeUnits {
			if su.suffix == u && s > 0 && int64(s)%su.n == 0 {
				return fmt.Sprintf("%d%s", int64(s)/su.n, u)
			}
		}
	}
	return strconv.FormatInt(int64(s), 10)
}
