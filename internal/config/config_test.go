package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type testConfig struct {
	Listen    string            `mapstructure:"listen"`
	DataDir   string            `mapstructure:"data-dir"`
	Metastore []string          `mapstructure:"metastore"`
	Interval  time.Duration     `mapstructure:"interval"`
	Size      int               `mapstructure:"size"`
	Enabled   bool              `mapstructure:"enabled"`
	Addrs     map[string]string `mapstructure:"addrs"`
}

func flags(args ...string) *pflag.FlagSet {
	f := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.String("listen", "127.0.0.1:1", "")
	f.String("data-dir", "./data", "")
	f.StringSlice("metastore", []string{"127.0.0.1:2379"}, "")
	f.Duration("interval", time.Second, "")
	f.Int("size", 10, "")
	f.Bool("enabled", true, "")
	f.StringToString("addrs", nil, "")
	if err := f.Parse(args); err != nil {
		panic(err)
	}
	return f
}

func writeFile(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, "listen: 10.0.0.1:5\ndata-dir: /from/file\nsize: 30\nmetastore: [a:1, b:2]\n")
	t.Setenv("MAGNETAR_DATA_DIR", "/from/env")
	t.Setenv("MAGNETAR_INTERVAL", "5s")
	var got testConfig
	if err := Load(flags("--size=99"), file, &got); err != nil {
		t.Fatal(err)
	}
	want := testConfig{
		Listen:    "10.0.0.1:5",           // file over default
		DataDir:   "/from/env",            // env over file
		Metastore: []string{"a:1", "b:2"}, // file list
		Interval:  5 * time.Second,        // env over default
		Size:      99,                     // flag over file
		Enabled:   true,                   // default
		Addrs:     map[string]string{},    // default: none
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestDefaultsAndEnvList(t *testing.T) {
	t.Setenv("MAGNETAR_METASTORE", "x:1,y:2")
	t.Setenv("MAGNETAR_ENABLED", "false")
	var got testConfig
	if err := Load(flags(), "", &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Metastore, []string{"x:1", "y:2"}) || got.Enabled || got.Listen != "127.0.0.1:1" || got.Interval != time.Second {
		t.Fatalf("got %+v", got)
	}
}

// A map from a flag, from the environment, from the file.
func TestMaps(t *testing.T) {
	want := map[string]string{"b-0": "h:1", "b-1": "h:2"}
	var got testConfig
	if err := Load(flags("--addrs", "b-0=h:1,b-1=h:2"), "", &got); err != nil || !reflect.DeepEqual(got.Addrs, want) {
		t.Fatalf("from a flag: %v %v", got.Addrs, err)
	}
	t.Setenv("MAGNETAR_ADDRS", "b-0=h:1, b-1=h:2")
	got = testConfig{}
	if err := Load(flags(), "", &got); err != nil || !reflect.DeepEqual(got.Addrs, want) {
		t.Fatalf("from the environment: %v %v", got.Addrs, err)
	}
	t.Setenv("MAGNETAR_ADDRS", "b-0")
	if err := Load(flags(), "", &got); err == nil {
		t.Fatal("a malformed map was accepted")
	}
	os.Unsetenv("MAGNETAR_ADDRS")
	got = testConfig{}
	if err := Load(flags(), writeFile(t, "addrs:\n  b-0: h:1\n  b-1: h:2\n"), &got); err != nil || !reflect.DeepEqual(got.Addrs, want) {
		t.Fatalf("from the file: %v %v", got.Addrs, err)
	}
}

func TestErrors(t *testing.T) {
	var c testConfig
	if err := Load(flags(), writeFile(t, "lisen: typo\n"), &c); err == nil || !strings.Contains(err.Error(), `unknown key "lisen"`) {
		t.Fatalf("unknown key: %v", err)
	}
	if err := Load(flags(), filepath.Join(t.TempDir(), "missing.yaml"), &c); err == nil {
		t.Fatal("missing file accepted")
	}
	if err := Load(flags(), writeFile(t, "size: [not, an, int]\n"), &c); err == nil {
		t.Fatal("bad value accepted")
	}
	if err := Load(flags(), writeFile(t, "listen: [unclosed\n"), &c); err == nil {
		t.Fatal("bad YAML accepted")
	}
}

// ApplyToFlags: command line over environment over file over defaults,
// lists and maps from both.
func TestApplyToFlags(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	url := fs.String("url", "default", "")
	msgs := fs.StringArray("messages", nil, "")
	eps := fs.StringSlice("metastore", []string{"d:1"}, "")
	props := fs.StringToString("properties", nil, "")
	n := fs.Int("num", 1, "")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("url: from-file\nmessages: [a, b]\nmetastore: [f:1, f:2]\nproperties: {k: v}\nnum: 5\n"), 0o644)
	t.Setenv("MAGNETAR_METASTORE", "e:1,e:2,e:3")
	if err := fs.Parse([]string{"--num", "7"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyToFlags(fs, file); err != nil {
		t.Fatal(err)
	}
	if *url != "from-file" || !slices.Equal(*msgs, []string{"a", "b"}) || !slices.Equal(*eps, []string{"e:1", "e:2", "e:3"}) ||
		(*props)["k"] != "v" || *n != 7 {
		t.Fatalf("url %q messages %q metastore %q properties %v num %d", *url, *msgs, *eps, *props, *n)
	}
	t.Setenv("MAGNETAR_NUM", "x")
	fs2 := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs2.Int("num", 1, "")
	if err := ApplyToFlags(fs2, ""); err == nil || !strings.Contains(err.Error(), "MAGNETAR_NUM: --num") {
		t.Fatalf("a bad value from the environment: %v", err)
	}
}
