package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// goodYAML is minimal, a line of its own first.
const goodYAML = "controlSocket: /tmp/baton-test.sock" + minimal

// problemsOf parses text as the file bad.yaml and returns its problems,
// one a line.
func problemsOf(t *testing.T, text string) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadOffline(path)
	var ps *Problems
	if !errors.As(err, &ps) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("load: %v, want its Problems (an ErrInvalid)", err)
	}
	return strings.Split(strings.ReplaceAll(err.Error(), path, "bad.yaml"), "\n")
}

// The operator, with a config of several mistakes: every one of
// them in one run, each where it is (FILE:LINE:COLUMN, as nginx -t and
// compilers say it), by its key path, in the YAML's words, a misspelt key
// with the key it resembles; then the values' own rules (a route to a
// backend not defined), placed at the key they are about.
func TestProblemsSaidWhereTheyAre(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"shape", strings.NewReplacer(
			"listeners:", "workers: \"two\"\nlisteners:",
			"    address: 127.0.0.1:8080\n", "    address: 127.0.0.1:8080\n    reusePort: yes\n",
			"    static: [\"127.0.0.1:9000\"]\n", "    static: [\"127.0.0.1:9000\"]\n    conectTimeout: 2s\n    responseTimeout: 10\n    Protocol: h2c\n",
		).Replace(goodYAML), []string{
			`bad.yaml:2:10: workers: "two" is not a whole number`,
			`bad.yaml:6:16: listeners[0].reusePort: "yes" is not true or false`,
			`bad.yaml:10:5: backends[0]: unknown key "conectTimeout" (did you mean "connectTimeout"?)`,
			`bad.yaml:11:22: backends[0].responseTimeout: duration must be a string like "10s", not 10`,
			`bad.yaml:12:5: backends[0]: unknown key "Protocol" (did you mean "protocol"?)`,
		}},
		{"syntax: a key indented wrong", strings.Replace(goodYAML, "    backend: app", "   backend: app", 1), []string{
			`bad.yaml:8: YAML syntax: did not find expected '-' indicator`,
		}},
		{"a list where a mapping goes, a key given twice", goodYAML + "http: [1]\nworkers: 2\nworkers: 3\n", []string{
			`bad.yaml:11:7: http: a list is not a mapping of keys to values`,
			`bad.yaml:13:1: workers: given twice`,
		}},
		{"values", strings.Replace(strings.Replace(goodYAML, "backend: app", "backend: nope", 1), "name: web", "name: web\n    protocol: udp", 1), []string{
			`bad.yaml:3:5: listener "web": protocol must be "http" or "tcp", not "udp"`,
			`bad.yaml:10:5: routes[0]: backend "nope" is not defined`,
		}},
	} {
		got := problemsOf(t, tc.text)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// Files that are not a config at all are refused at once with a clear
// word, within bounded memory: empty, not UTF-8, a YAML bomb (billion
// laughs: anchors of anchors), nested 10,000 deep, larger than MaxSize,
// and a file of nothing but mistakes (its first 50 said).
func TestProblemsOfFilesThatAreNoConfig(t *testing.T) {
	bomb := []string{`a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]`}
	for c := 'b'; c <= 'i'; c++ {
		p := string(c - 1)
		bomb = append(bomb, fmt.Sprintf("%c: &%c [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]", c, c, p, p, p, p, p, p, p, p, p))
	}
	bomb = append(bomb, "routes: *i")
	many := strings.Repeat("x: 1\n", 200)
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "bad.yaml:1: the file is empty"},
		{"not UTF-8", "controlSocket: \"\xff\xfe\"\n", "bad.yaml:1: the file is not UTF-8 text"},
		{"a YAML bomb", strings.Join(bomb, "\n") + "\n", `bad.yaml:1:1: unknown key "a"`},
		{"nested 10,000 deep", "routes: " + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "\n", "bad.yaml:1:10: routes[0]: a list is not a mapping"},
		{"nothing but mistakes", many, `bad.yaml:1:1: unknown key "x"`},
	} {
		got := problemsOf(t, tc.text)
		if !strings.HasPrefix(got[0], tc.want) {
			t.Errorf("%s: %q, want it to begin %q", tc.name, got[0], tc.want)
		}
		if len(got) > maxProblems+1 {
			t.Errorf("%s: %d problems said, want at most %d and a line that says the rest are not", tc.name, len(got), maxProblems+1)
		}
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(goodYAML+"# "+strings.Repeat("x", MaxSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOffline(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file past MaxSize: %v", err)
	}
}

func TestClosestKey(t *testing.T) {
	fields := fieldsOf(reflectTypeOfBackend())
	for key, want := range map[string]string{
		"conectTimeout": "connectTimeout", "ConnectTimeout": "connectTimeout", "statc": "static",
		"protocl": "protocol", "zzz": "", "kubernetesX": "kubernetes",
	} {
		if got := closest(key, fields); got != want {
			t.Errorf("closest(%q) = %q, want %q", key, got, want)
		}
	}
}

func reflectTypeOfBackend() reflect.Type { return reflect.TypeFor[Backend]() }
