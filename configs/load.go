package configs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v3"
)

// FieldError is one problem in a config file: the key path, the line it
// is on (0 when the key is absent from the file) and what is wrong.
type FieldError struct {
	Path string
	Line int
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Msg)
}

// Errors is every problem found in one file, in file order.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Load reads, decodes, validates and resolves the secrets of the config at
// path. Warnings (e.g. an expired override that is ignored) are in
// Config.Warnings.
func Load(path string) (*Config, error) { return LoadEnv(path, os.Getenv) }

// LoadEnv is Load with the environment it reads: $STATE_DIRECTORY, which
// systemd sets from the unit's StateDirectory=, is where the state file
// goes when the file names none, so each vigil@NAME instance keeps its
// own (/var/lib/vigil/NAME/state.json) with one config shape for all.
func LoadEnv(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data, time.Now())
	if err != nil {
		return nil, fmt.Errorf("config %s:\n%w", path, err)
	}
	cfg.Source = path
	if dir, _, _ := strings.Cut(getenv("STATE_DIRECTORY"), ":"); dir != "" && !cfg.IsSet("watchdog.state_file") {
		cfg.Watchdog.StateFile = filepath.Join(dir, "state.json")
	}
	return cfg, nil
}

// IsSet reports whether the file set the key path (rather than leaving
// it to its default).
func (c *Config) IsSet(path string) bool {
	_, ok := c.Lines[path]
	return ok
}

// Parse decodes data over the defaults and validates it as of now. The
// error, if any, is an Errors value listing every problem.
func Parse(data []byte, now time.Time) (*Config, error) {
	cfg := Default()
	v := &validator{now: now, lines: map[string]int{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, Errors{v.yamlError(err)}
	}
	if len(root.Content) == 0 || root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null" {
		// An empty file (or comments only) is almost always a mistake: a
		// truncated copy, the wrong path. Running on bare defaults would
		// watch an engine nobody named.
		return nil, Errors{{Path: "(file)", Msg: "is empty: at least engine.url is required"}}
	}
	v.walk(root.Content[0], reflect.TypeOf(cfg), "")
	if len(v.errs) > 0 {
		return nil, v.sorted()
	}
	if err := root.Content[0].Decode(&cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, msg := range te.Errors {
				v.errs = append(v.errs, v.yamlError(errors.New(msg)))
			}
			return nil, v.sorted()
		}
		return nil, Errors{v.yamlError(err)}
	}
	if _, ok := v.lines["engine.url"]; !ok {
		// The default points at the simulated engine on localhost; a real
		// node must say which engine it watches.
		v.errs = append(v.errs, &FieldError{Path: "engine.url", Msg: "is required: the engine's base URL, e.g. http://127.0.0.1:8000"})
	}
	cfg.Engine.resolveKind(v.lines)
	cfg.validate(v)
	if len(v.errs) == 0 {
		cfg.resolveSecrets(v)
	}
	if len(v.errs) > 0 {
		return nil, v.sorted()
	}
	cfg.Warnings = v.warnings
	cfg.Lines = v.lines
	return &cfg, nil
}

// validator collects errors with the line of each key path.
type validator struct {
	now      time.Time
	lines    map[string]int // key path -> line in the file
	errs     Errors
	warnings []string
}

func (v *validator) line(path string) int {
	for p := path; p != ""; {
		if l, ok := v.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

func (v *validator) errorf(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Line: v.line(path), Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) warnf(path, format string, args ...any) {
	v.warnings = append(v.warnings, (&FieldError{Path: path, Line: v.line(path), Msg: fmt.Sprintf(format, args...)}).Error())
}

// sorted puts the errors in file order; keys absent from the file (line
// 0) come last.
func (v *validator) sorted() Errors {
	key := func(e *FieldError) int {
		if e.Line == 0 {
			return int(^uint(0) >> 1)
		}
		return e.Line
	}
	sort.SliceStable(v.errs, func(i, j int) bool { return key(v.errs[i]) < key(v.errs[j]) })
	return v.errs
}

func (v *validator) nonEmpty(path, s string) bool {
	if strings.TrimSpace(s) == "" {
		v.errorf(path, "is required")
		return false
	}
	return true
}

func (v *validator) positive(path string, d time.Duration) bool {
	if d <= 0 {
		v.errorf(path, "must be > 0")
		return false
	}
	return true
}

// nonNegative reports path when n is below zero; zero, when set, says
// what 0 means there ("0 = automatic").
func nonNegative[N ~int | ~int64 | ~float64](v *validator, path string, n N, zero string) {
	switch {
	case n >= 0:
	case zero != "":
		v.errorf(path, "must be >= 0 (%s)", zero)
	default:
		v.errorf(path, "must be >= 0")
	}
}

func (v *validator) secretSource(path string, s SecretSource) {
	if s.File != "" && s.Env != "" {
		v.errorf(path, "set file or env, not both")
	}
}

func (v *validator) cronSpec(path, spec string) {
	if _, err := cron.ParseStandard(spec); err != nil {
		v.errorf(path, "not a cron schedule: %v", err)
	}
}

func indexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError turns a YAML library error ("line 5: cannot unmarshal ...")
// into a FieldError naming the deepest key on that line.
func (v *validator) yamlError(err error) *FieldError {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &FieldError{Path: "(file)", Msg: err.Error()}
	}
	line, _ := strconv.Atoi(m[1])
	path := "(file)"
	for p, l := range v.lines {
		if l == line && len(p) > len(path) || l == line && path == "(file)" {
			path = p
		}
	}
	msg := strings.Replace(m[2], "!!str ", "string ", 1)
	return &FieldError{Path: path, Line: line, Msg: msg}
}

var (
	durationType     = reflect.TypeOf(time.Duration(0))
	autoDurationType = reflect.TypeOf(AutoDuration{})
	timeType         = reflect.TypeOf(time.Time{})
)

// walk checks the YAML tree against the Go type before decoding: unknown
// keys and bare-number durations are errors with their path and line. It
// also records the line of every key for later validation errors.
func (v *validator) walk(n *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch {
	case t == autoDurationType:
		// Checked here, not only when decoded, so the error names the key
		// and its line.
		if err := autoDurationNode(n); err != nil {
			v.errs = append(v.errs, &FieldError{Path: path, Line: n.Line, Msg: err.Error()})
		}
	case t == durationType:
		if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") && n.Value != "0" {
			v.errs = append(v.errs, &FieldError{Path: path, Line: n.Line,
				Msg: fmt.Sprintf("%s is a bare number; write a duration with a unit, e.g. %ss", n.Value, n.Value)})
		}
	case t == timeType:
		// The decoder's own error for a bad time names neither key nor
		// line ("parsing time ..."), so check here. An unquoted YAML
		// timestamp (!!timestamp) is what the decoder accepts besides RFC
		// 3339 text.
		if n.Kind != yaml.ScalarNode {
			v.errs = append(v.errs, &FieldError{Path: path, Line: n.Line, Msg: "must be an RFC 3339 time such as 2026-12-01T09:00:00Z"})
		} else if n.Tag != "!!null" && n.Tag != "!!timestamp" {
			if _, err := time.Parse(time.RFC3339Nano, n.Value); err != nil {
				v.errs = append(v.errs, &FieldError{Path: path, Line: n.Line,
					Msg: fmt.Sprintf("%q is not an RFC 3339 time such as 2026-12-01T09:00:00Z", n.Value)})
			}
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if n.Tag != "!!null" {
				v.errs = append(v.errs, &FieldError{Path: orFile(path), Line: n.Line, Msg: "must be a mapping of keys"})
			}
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			v.lines[p] = k.Line
			ft, ok := fields[k.Value]
			if !ok {
				v.errs = append(v.errs, &FieldError{Path: p, Line: k.Line, Msg: "unknown key" + suggest(k.Value, fields)})
				continue
			}
			v.walk(val, ft, p)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return // the decoder reports the type error with its line
		}
		for i, item := range n.Content {
			p := indexPath(path, i)
			v.lines[p] = item.Line
			v.walk(item, t.Elem(), p)
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			v.lines[p] = n.Content[i].Line
			v.walk(n.Content[i+1], t.Elem(), p)
		}
	}
}

// yamlFields maps the YAML keys of a struct type to field types,
// flattening ",inline" fields and skipping "-".
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, ft := range yamlFields(f.Type) {
				out[k] = ft
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orFile(path string) string {
	if path == "" {
		return "(file)"
	}
	return path
}

// suggest names the closest known key, for typos like "hang_afer".
func suggest(key string, fields map[string]reflect.Type) string {
	best, bestD := "", 3
	for k := range fields {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Redacted renders the config as YAML for display (check-config, /status):
// secrets show as <redacted>, and the durations that are auto as auto, as
// the file would say it.
func (c *Config) Redacted() string {
	root, err := c.display()
	if err != nil {
		return fmt.Sprintf("# cannot render the config: %v\n", err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	_ = enc.Encode(root)
	return buf.String()
}

// display is the config as a YAML tree for display: secrets redacted and
// auto durations as auto, each by its own encoding.
func (c *Config) display() (*yaml.Node, error) {
	var root yaml.Node
	if err := root.Encode(c); err != nil {
		return nil, err
	}
	return &root, nil
}
