package configs

import (
	"reflect"
	"strings"
)

// Change is one key whose value differs between two configs. Old and New
// are the values themselves; a Secret among them prints redacted.
type Change struct {
	Key      string
	Old, New any
}

// Changed lists the keys (YAML paths such as watchdog.dry_run) whose value
// differs from a to b, in schema order. Scalars are compared one by one;
// a list (engine.metrics.progress, pool.peers, overrides, ...) is one key.
// A secret whose file or variable now holds another value is reported
// under its own key (engine.api_key), without the value.
func Changed(a, b *Config) []Change {
	var out []Change
	walkLeaves(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), "", func(key string, va, vb reflect.Value) {
		if !reflect.DeepEqual(va.Interface(), vb.Interface()) {
			out = append(out, Change{Key: key, Old: va.Interface(), New: vb.Interface()})
		}
	})
	return out
}

// Keep sets key (as Changed names it) in c back to its value in from: a
// reload keeps the running value of a key that needs a restart, so c then
// says what is really in force. It reports whether key was found.
func (c *Config) Keep(key string, from *Config) bool {
	found := false
	walkLeaves(reflect.ValueOf(c).Elem(), reflect.ValueOf(from).Elem(), "", func(k string, dst, src reflect.Value) {
		if k == key {
			dst.Set(src)
			found = true
		}
	})
	return found
}

var secretType = reflect.TypeOf(Secret(""))

// walkLeaves calls fn with each leaf key of two values of one struct type.
// A resolved Secret (yaml:"-") is named by its struct's SecretSource key;
// a time and an AutoDuration are one value each.
func walkLeaves(a, b reflect.Value, path string, fn func(key string, a, b reflect.Value)) {
	t := a.Type()
	if t.Kind() != reflect.Struct || t == timeType || t == autoDurationType {
		fn(path, a, b)
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-" && f.Type == secretType:
			fn(join(path, secretSourceKey(t)), a.Field(i), b.Field(i))
		case name == "-":
		case strings.Contains(opts, "inline"):
			walkLeaves(a.Field(i), b.Field(i), path, fn)
		default:
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			walkLeaves(a.Field(i), b.Field(i), join(path, name), fn)
		}
	}
}

// secretSourceKey is the YAML key of t's SecretSource field: a section
// holds one secret, read from that source.
func secretSourceKey(t reflect.Type) string {
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i); f.Type == reflect.TypeOf(SecretSource{}) {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			return name
		}
	}
	return "secret"
}

// Map renders the config as nested maps with the YAML keys, durations as
// text ("15s") and secrets left out (only where they come from shows), for
// JSON views such as /status.
func (c *Config) Map() map[string]any {
	root, err := c.display() // auto durations as auto
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	var m map[string]any
	if err := root.Decode(&m); err != nil {
		return map[string]any{"error": err.Error()}
	}
	return m
}
