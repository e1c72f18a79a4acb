package bytesize

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
		err  string
	}{
		{"0", 0, ""},
		{"1048576", 1 << 20, ""},
		{"512MiB", 512 << 20, ""},
		{"512mib", 512 << 20, ""},
		{"512M", 512 << 20, ""},
		{"512MB", 512 << 20, ""},
		{" 2 GiB ", 2 << 30, ""},
		{"1.5GiB", 3 << 29, ""},
		{"64KiB", 64 << 10, ""},
		{"1TiB", 1 << 40, ""},
		{"100B", 100, ""},
		{"", 0, "want a number"},
		{"MiB", 0, "want a number"},
		{"12 parsecs", 0, "want a number"},
		{"-1MiB", 0, "negative"},
		{"-0.5GiB", 0, "negative"},
		{"9999999999TiB", 0, "too large"},
		{"1e30", 0, "too large"},
		{"NaNMiB", 0, "want a number"},
		{"0.5", 0, "not a whole number of bytes"},
		{"1.0000001KiB", 0, "not a whole number of bytes"},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %d", tc.in, int64(got), err, tc.want)
		}
	}
}

func TestStringParsesBack(t *testing.T) {
	for _, tc := range []struct {
		in   Size
		want string
	}{
		{0, "0"},
		{100, "100"},
		{64 << 10, "64KiB"},
		{512 << 20, "512MiB"},
		{3 << 30, "3GiB"},
		{1 << 40, "1TiB"},
		{3 << 29, "1536MiB"},
		{3<<19 + 1, "1572865"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%d.String() = %q, want %q", int64(tc.in), got, tc.want)
		}
		if back, err := Parse(tc.in.String()); err != nil || (tc.in%(1<<10) == 0 && back != tc.in) {
			t.Errorf("Parse(%q) = %v, %v; want %d", tc.in.String(), int64(back), err, int64(tc.in))
		}
	}
	var s Size
	if err := s.Set("256MiB"); err != nil || s != 256<<20 || s.Type() != "size" {
		t.Errorf("Set: %v %v", s, err)
	}
	if err := s.Set("lots"); err == nil || s != 256<<20 {
		t.Errorf("Set(lots) = %v, kept %v", err, s)
	}
}
