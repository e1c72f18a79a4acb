// Package config fills a daemon's configuration struct from, in order of
// precedence: command-line flags that were set, MAGNETAR_* environment
// variables, an optional YAML file (--config), and the struct's defaults
// (the flags' default values). Keys are the flag names: --data-dir,
// MAGNETAR_DATA_DIR and `data-dir:` in YAML all set the same field, the one
// tagged `mapstructure:"data-dir"`.
package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/magnetar-io/magnetar/internal/bytesize"
)

// EnvPrefix is the prefix of environment variables.
const EnvPrefix = "MAGNETAR"

// Load fills out from flags, environment and the YAML file at path (none
// if path is empty). Unknown keys in the file are an error, so that a typo
// does not silently leave a default in place.
func Load(flags *pflag.FlagSet, path string, out any) error {
	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	v.AutomaticEnv()
	var skip = map[string]bool{"config": true, "help": true, "log-level": true, "log-format": true}
	var bindErr error
	flags.VisitAll(func(f *pflag.Flag) {
		if skip[f.Name] {
			return
		}
		if err := v.BindPFlag(f.Name, f); err != nil {
			bindErr = errors.Join(bindErr, err)
		}
	})
	if bindErr != nil {
		return bindErr
	}
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		for _, k := range v.AllKeys() {
			if flags.Lookup(k) == nil && !skip[k] {
				return fmt.Errorf("config file %s: unknown key %q", path, k)
			}
		}
	}
	hooks := viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
		mapstructure.StringToSliceHookFunc(","),
		stringToMap,
		stringToByteSize,
	))
	if err := v.Unmarshal(out, hooks); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return nil
}

// stringToByteSize decodes a bytesize.Size field from text (a flag, an
// environment variable, a quoted YAML value); numbers decode as bytes.
func stringToByteSize(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(bytesize.Size(0)) || from.Kind() != reflect.String {
		return data, nil
	}
	return bytesize.Parse(data.(string))
}

// stringToMap decodes "k=v,k2=v2" (an environment variable, or a flag's
// text "[k=v,k2=v2]") into a map[string]string field.
func stringToMap(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to != reflect.TypeOf(map[string]string{}) {
		return data, nil
	}
	s := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(data.(string)), "["), "]")
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// ApplyToFlags fills the flags of a command that keeps its settings in
// flag variables (the client-side commands: client, admin, perf) from the
// same sources as Load: a flag given on the command line wins, then its
// MAGNETAR_* environment variable, then the YAML file at path (none if
// empty), then its default. Unknown keys in the file are an error.
func ApplyToFlags(flags *pflag.FlagSet, path string) error {
	skip := map[string]bool{"config": true, "help": true, "log-level": true, "log-format": true}
	given := map[string]bool{}
	flags.Visit(func(f *pflag.Flag) { given[f.Name] = true })
	set := func(f *pflag.Flag, values []string, source string) error {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			if err := sv.Replace(values); err != nil {
				return fmt.Errorf("%s: --%s: %w", source, f.Name, err)
			}
			f.Changed = true
			return nil
		}
		if err := flags.Set(f.Name, strings.Join(values, ",")); err != nil {
			return fmt.Errorf("%s: --%s: %w", source, f.Name, err)
		}
		return nil
	}
	if path != "" {
		v := viper.New()
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		settings := v.AllSettings() // top-level keys; a map stays one value
		for _, k := range slices.Sorted(maps.Keys(settings)) {
			f := flags.Lookup(k)
			if f == nil || skip[k] {
				return fmt.Errorf("config file %s: unknown key %q", path, k)
			}
			if given[k] {
				continue
			}
			var values []string
			switch x := settings[k].(type) {
			case []any:
				for _, e := range x {
					values = append(values, fmt.Sprint(e))
				}
			case map[string]any:
				for mk, mv := range x {
					values = append(values, fmt.Sprintf("%s=%v", mk, mv))
				}
			default:
				values = []string{fmt.Sprint(x)}
			}
			if err := set(f, values, "config file "+path); err != nil {
				return err
			}
		}
	}
	var err error
	flags.VisitAll(func(f *pflag.Flag) {
		if err != nil || skip[f.Name] || given[f.Name] {
			return
		}
		env := EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(f.Name))
		if val, ok := os.LookupEnv(env); ok {
			values := []string{val}
			if _, slice := f.Value.(pflag.SliceValue); slice {
				values = strings.Split(val, ",")
			}
			err = set(f, values, env)
		}
	})
	return err
}
