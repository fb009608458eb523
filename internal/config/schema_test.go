package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// The schema shipped (schema.json, embedded for `baton config schema`) is
// the one the config types and their comments make now: a key added,
// removed or documented anew without `go generate ./internal/config`
// fails here.
func TestSchemaUpToDate(t *testing.T) {
	docs, err := FieldDocs(".")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Schema(docs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, SchemaJSON) {
		t.Fatal("schema.json is not what the config types make: run go generate ./internal/config")
	}
}

// modeline is the first line of a config example: yaml-language-server
// validates and completes the file with the schema it names.
var modeline = regexp.MustCompile(`^# yaml-language-server: \$schema=(\S+)\n`)

// Every config in examples/ starts with the modeline, whose path reaches
// schema.json; each is valid to the schema and to baton check (--offline).
// Every YAML block of the docs that is a config (one with a top-level
// listeners, backends, routes, gateway or ingress key) is valid to the
// schema and to baton check's shape (a block may leave keys out: the
// values' own rules are not held to it), so that the schema and the
// checker agree with each other and with what the docs tell operators.
func TestConfigsAgainstSchema(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(SchemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Glob("../../examples/*.yaml")
	more, _ := filepath.Glob("../../examples/*/*.yaml")
	deeper, _ := filepath.Glob("../../examples/*/*/*.yaml")
	n := 0
	for _, path := range append(append(examples, more...), deeper...) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !isConfig(b) {
			continue
		}
		n++
		m := modeline.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: does not start with %q", path, "# yaml-language-server: $schema=...")
		} else if got, _ := filepath.Abs(filepath.Join(filepath.Dir(path), string(m[1]))); got != mustAbs(t, "schema.json") {
			t.Errorf("%s: the modeline names %s, not schema.json", path, m[1])
		}
		if err := validateYAML(schema, b); err != nil {
			t.Errorf("%s: against the schema: %v", path, err)
		}
		if _, err := LoadOffline(path); err != nil {
			t.Errorf("%s: baton check --offline: %v", path, err)
		}
	}
	if n < 4 {
		t.Errorf("%d configs in examples/, want the 4 there are at least", n)
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	blocks := 0
	for _, path := range append(docs, "../../README.md") {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range yamlBlocks(b) {
			if !isConfig(block) {
				continue
			}
			blocks++
			if err := validateYAML(schema, block); err != nil {
				t.Errorf("%s, YAML block %d: against the schema: %v", path, i+1, err)
			}
			if _, problems := checkShape(block); len(problems) > 0 {
				t.Errorf("%s, YAML block %d: baton check says %v", path, i+1, problems)
			}
		}
	}
	t.Logf("%d examples and %d YAML blocks of the docs held to the schema", n, blocks)
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var configKey = regexp.MustCompile(`(?m)^(listeners|backends|routes|gateway|ingress|controlSocket):`)

func isConfig(b []byte) bool { return configKey.Match(b) }

var fence = regexp.MustCompile("(?s)```yaml\n(.*?)```")

func yamlBlocks(md []byte) [][]byte {
	var out [][]byte
	for _, m := range fence.FindAllSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

func validateYAML(schema map[string]any, b []byte) error {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return err
	}
	return validate(schema, schema, v, "")
}

// validate holds v to schema s (root: for $ref): the part of JSON Schema
// that schema.json uses (type, properties, additionalProperties, items,
// enum, pattern, anyOf, allOf, $ref, minimum, maximum, minLength).
func validate(root, s map[string]any, v any, path string) error {
	if ref, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		def, ok := root["$defs"].(map[string]any)[name].(map[string]any)
		if !ok {
			return fmt.Errorf("%s: $ref %s not in $defs", path, ref)
		}
		return validate(root, def, v, path)
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, sub := range all {
			if err := validate(root, sub.(map[string]any), v, path); err != nil {
				return err
			}
		}
	}
	if anyOf, ok := s["anyOf"].([]any); ok {
		var errs []string
		for _, sub := range anyOf {
			err := validate(root, sub.(map[string]any), v, path)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("%s: none of anyOf: %s", path, strings.Join(errs, "; "))
		}
	}
	if e, ok := s["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || x == v
		}
		if !found {
			return fmt.Errorf("%s: %v is not one of %v", path, v, e)
		}
	}
	typ, _ := s["type"].(string)
	switch typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an object", path, v)
		}
		props, _ := s["properties"].(map[string]any)
		for k, x := range m {
			p, ok := props[k].(map[string]any)
			if !ok {
				switch ap := s["additionalProperties"].(type) {
				case bool:
					if !ap {
						return fmt.Errorf("%s: key %q is not in the schema", path, k)
					}
					continue
				case map[string]any:
					p = ap
				default:
					continue
				}
			}
			if err := validate(root, p, x, path+"."+k); err != nil {
				return err
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an array", path, v)
		}
		items, _ := s["items"].(map[string]any)
		for i, x := range a {
			if err := validate(root, items, x, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: %v is not a string", path, v)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", path, str, p)
		}
		if n, ok := s["minLength"].(float64); ok && float64(len(str)) < n {
			return fmt.Errorf("%s: %q is shorter than %v", path, str, n)
		}
	case "integer", "number":
		var f float64
		switch x := v.(type) {
		case int:
			f = float64(x)
		case float64:
			if typ == "integer" && x != float64(int64(x)) {
				return fmt.Errorf("%s: %v is not an integer", path, v)
			}
			f = x
		default:
			return fmt.Errorf("%s: %v is not a number", path, v)
		}
		if m, ok := s["minimum"].(float64); ok && f < m {
			return fmt.Errorf("%s: %v is below %v", path, v, m)
		}
		if m, ok := s["maximum"].(float64); ok && f > m {
			return fmt.Errorf("%s: %v is above %v", path, v, m)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %v is not true or false", path, v)
		}
	}
	return nil
}

// What baton check refuses for its shape, the schema refuses too: an
// editor marks it while it is typed.
func TestSchemaRefusesWhatCheckDoes(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(SchemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{
		strings.Replace(goodYAML, "listeners:", "workers: \"two\"\nlisteners:", 1),
		strings.Replace(goodYAML, "    static:", "    conectTimeout: 2s\n    static:", 1),
		strings.Replace(goodYAML, "    static:", "    connectTimeout: 10\n    static:", 1),
		strings.Replace(goodYAML, "    static:", "    protocol: http3\n    static:", 1),
		strings.Replace(goodYAML, "    address: 127.0.0.1:8080", "    address: 127.0.0.1:8080\n    reusePort: yes", 1),
		goodYAML + "http: {maxBodySize: 1 TB}\n",
	} {
		if validateYAML(schema, []byte(text)) == nil {
			t.Errorf("the schema takes\n%s", text)
		}
		if _, problems := checkShape([]byte(text)); len(problems) == 0 && !strings.Contains(text, "http3") {
			t.Errorf("baton check takes\n%s", text)
		}
	}
	if err := validateYAML(schema, []byte(goodYAML+"http: {maxBodySize: 1MiB, idleTimeout: 1m30s}\n")); err != nil {
		t.Errorf("a good config: %v", err)
	}
}
