// Package bytesize is a size in bytes written with a unit (512MiB) in
// flags, environment variables and configuration files.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a size in bytes that flags, environment variables and the
// YAML file may write with a unit: 512MiB, 1GiB, 64KiB, or a plain
// number of bytes. Units are powers of 1024 (KiB, MiB, GiB, TiB; K, M,
// G, T and KB, MB, GB, TB mean the same, as in Pulsar's and Kubernetes'
// habits for memory).
type Size int64

var byteUnits = []struct {
	suffixes []string
	mult     int64
}{
	{[]string{"TIB", "TB", "T"}, 1 << 40},
	{[]string{"GIB", "GB", "G"}, 1 << 30},
	{[]string{"MIB", "MB", "M"}, 1 << 20},
	{[]string{"KIB", "KB", "K"}, 1 << 10},
	{[]string{"B", ""}, 1},
}

// Parse parses "512MiB", "1.5GiB", "1048576".
func Parse(s string) (Size, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	for _, u := range byteUnits {
		for _, suf := range u.suffixes {
			num, ok := strings.CutSuffix(t, suf)
			if !ok {
				continue
			}
			num = strings.TrimSpace(num)
			if n, err := strconv.ParseInt(num, 10, 64); err == nil {
				if n < 0 {
					return 0, fmt.Errorf("size %q: negative", s)
				}
				if n > math.MaxInt64/u.mult {
					return 0, fmt.Errorf("size %q: too large", s)
				}
				return Size(n * u.mult), nil
			}
			f, err := strconv.ParseFloat(num, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return 0, fmt.Errorf("size %q: want a number of bytes or a number with a unit (KiB, MiB, GiB, TiB)", s)
			}
			if f < 0 {
				return 0, fmt.Errorf("size %q: negative", s)
			}
			v := f * float64(u.mult)
			if v >= math.MaxInt64 {
				return 0, fmt.Errorf("size %q: too large", s)
			}
			if v != math.Trunc(v) {
				return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
			}
			return Size(v), nil
		}
	}
	return 0, fmt.Errorf("size %q: want a number of bytes or a number with a unit (KiB, MiB, GiB, TiB)", s)
}

// String writes the size with the largest unit that divides it, or in
// bytes.
func (b Size) String() string {
	for _, u := range byteUnits[:4] {
		if b != 0 && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffixes[0][:1] + "iB"
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set implements pflag.Value.
func (b *Size) Set(s string) error {
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Type implements pflag.Value.
func (b *Size) Type() string { return "size" }
