package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// Problem is one thing wrong in a config file, where it is: a line and
// column (1-based; 0 when unknown), the key path ("listeners[0].tls"),
// and what is wrong, in the YAML's words.
type Problem struct {
	Line, Column int
	Path         string
	Message      string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:", p.Line)
		if p.Column > 0 {
			fmt.Fprintf(&b, "%d:", p.Column)
		}
		b.WriteByte(' ')
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is every problem a config file has, in the file's order. Its
// Error is one per line, "FILE:LINE:COLUMN: PATH: what is wrong" (nginx
// -t's and a compiler's form, which editors and CI annotate); it wraps
// ErrInvalid.
type Problems struct {
	File string // "" when the config came from elsewhere than a file
	List []Problem
}

func (ps *Problems) Error() string {
	var b strings.Builder
	for i, p := range ps.List {
		if i > 0 {
			b.WriteByte('\n')
		}
		if ps.File != "" {
			b.WriteString(ps.File)
			b.WriteByte(':')
			if p.Line == 0 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Summary says how many problems there are, and where: "config
// bad.yaml: 3 problems".
func (ps *Problems) Summary() string {
	what := "config"
	if ps.File != "" {
		what += " " + ps.File
	}
	if len(ps.List) == 1 {
		return what + ": 1 problem"
	}
	return fmt.Sprintf("%s: %d problems", what, len(ps.List))
}

// Unwrap makes a Problems an ErrInvalid.
func (ps *Problems) Unwrap() error { return ErrInvalid }

// Limits of what the checker reads: a valid config is a few levels deep,
// and a YAML document whose aliases expand past maxNodes (a "billion
// laughs") is refused as it is read, before any of it is decoded.
const (
	maxDepth = 64
	maxNodes = 1 << 20
)

// checkShape parses data as YAML, keeping positions, and holds it to the
// Config type: every key the type has (a misspelt one is named, with the
// key it resembles), every value of the type the key asks (a number, a
// duration, a list). It returns the document, and the problems it has; a
// syntax error is the one problem when there is one.
func checkShape(data []byte) (*yaml.Node, []Problem) {
	if i := firstInvalidUTF8(data); i < len(data) {
		line := 1 + bytes.Count(data[:i], []byte("\n"))
		return nil, []Problem{{Line: line, Message: "the file is not UTF-8 text"}}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, []Problem{syntaxProblem(err)}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, []Problem{{Line: 1, Message: "the file is empty: a config needs at least its listeners, backends and routes"}}
	}
	c := &checker{}
	c.walk(doc.Content[0], reflect.TypeFor[Config](), "", 0)
	return doc.Content[0], c.problems
}

// firstInvalidUTF8 returns where b stops being UTF-8: len(b) when it is.
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxProblem is a YAML parser's error as a Problem: "yaml: line 8:
// found character that cannot start any token" is line 8 (the parser
// gives no column).
func syntaxProblem(err error) Problem {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{Line: line, Message: "YAML syntax: " + m[2]}
	}
	return Problem{Message: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
}

type checker struct {
	problems []Problem
	nodes    int
}

// maxProblems bounds the problems said of one file: a file of nothing
// but mistakes (or not a config at all) is told so in a screenful.
const maxProblems = 50

func (c *checker) add(n *yaml.Node, path, format string, args ...any) {
	switch {
	case len(c.problems) < maxProblems:
		c.problems = append(c.problems, Problem{Line: n.Line, Column: n.Column, Path: path, Message: fmt.Sprintf(format, args...)})
	case len(c.problems) == maxProblems:
		c.problems = append(c.problems, Problem{Line: n.Line, Column: n.Column, Message: fmt.Sprintf("more problems from here on, not said (the first %d are)", maxProblems)})
	}
}

var (
	unmarshaler = reflect.TypeFor[json.Unmarshaler]()
	bytesType   = reflect.TypeFor[[]byte]()
)

// walk holds node n, at path, to type t.
func (c *checker) walk(n *yaml.Node, t reflect.Type, path string, depth int) {
	if c.nodes++; c.nodes > maxNodes {
		if c.nodes == maxNodes+1 {
			c.add(n, path, "the document expands past %d values (aliases of aliases?): refused", maxNodes)
		}
		return
	}
	if depth > maxDepth {
		c.add(n, path, "nested deeper than %d levels: no key of the config is", maxDepth)
		return
	}
	if n.Kind == yaml.AliasNode {
		c.walk(n.Alias, t, path, depth+1)
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // absent: the default
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		c.custom(n, t, path)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		c.walk(n, t.Elem(), path, depth)
	case reflect.Struct:
		c.mapping(n, t, path, depth)
	case reflect.Slice:
		if t == bytesType {
			c.scalar(n, path, "!!str", "a string")
			return
		}
		if n.Kind != yaml.SequenceNode {
			c.add(n, path, "%s is not a list", describe(n))
			return
		}
		for i, item := range n.Content {
			c.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.add(n, path, "%s is not a mapping of keys to values", describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), depth+1)
		}
	case reflect.String:
		c.scalar(n, path, "!!str", "a string")
	case reflect.Bool:
		c.scalar(n, path, "!!bool", "true or false")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if !c.scalar(n, path, "!!int", "a whole number") {
			return
		}
		if !fits(n.Value, t) {
			c.add(n, path, "%s is out of range", n.Value)
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" && n.Tag != "!!float" {
			c.add(n, path, "%s is not a number", describe(n))
		}
	case reflect.Interface:
		// any value
	}
}

// scalar checks that n is a scalar of YAML tag, else says it is not what.
func (c *checker) scalar(n *yaml.Node, path, tag, what string) bool {
	if n.Kind == yaml.ScalarNode && n.Tag == tag {
		return true
	}
	msg := fmt.Sprintf("%s is not %s", describe(n), what)
	if tag == "!!str" && n.Kind == yaml.ScalarNode {
		msg += fmt.Sprintf(" (quote it: %q)", n.Value)
	}
	c.add(n, path, "%s", msg)
	return false
}

// fits reports whether the YAML integer v fits integer type t.
func fits(v string, t reflect.Type) bool {
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		_, err := strconv.ParseUint(strings.ReplaceAll(v, "_", ""), 0, t.Bits())
		return err == nil
	}
	_, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 0, t.Bits())
	return err == nil
}

// custom checks a value of a type with its own JSON form (a duration, a
// size, a port) by decoding it as the config's decoder will.
func (c *checker) custom(n *yaml.Node, t reflect.Type, path string) {
	var v any
	if err := n.Decode(&v); err != nil {
		c.add(n, path, "%v", err)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		c.add(n, path, "%s is not a value of this key", describe(n))
		return
	}
	if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b); err != nil {
		c.add(n, path, "%v", err)
	}
}

// mapping checks a mapping against struct type t: each key one of its
// fields' (by their JSON names), said once.
func (c *checker) mapping(n *yaml.Node, t reflect.Type, path string, depth int) {
	if n.Kind != yaml.MappingNode {
		c.add(n, path, "%s is not a mapping of keys to values", describe(n))
		return
	}
	fields := fieldsOf(t)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode || k.Value == "<<" {
			c.add(k, path, "merge keys and aliases as keys are not read: write the keys out")
			continue
		}
		if seen[k.Value] {
			c.add(k, join(path, k.Value), "given twice")
			continue
		}
		seen[k.Value] = true
		ft, ok := fields[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown key %q", k.Value)
			if s := closest(k.Value, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			c.add(k, path, "%s", msg)
			continue
		}
		c.walk(v, ft, join(path, k.Value), depth+1)
	}
}

// fieldsOf returns struct type t's fields by their JSON names, those of
// embedded structs included.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range fieldsOf(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// closest returns the key of fields that key is most likely a misspelling
// of: the same but for case, or at most two edits away (a third of the
// key's length at most); "" when none is.
func closest(key string, fields map[string]reflect.Type) string {
	best, bestD := "", 3
	for _, f := range slices.Sorted(maps.Keys(fields)) { // sorted: ties go the same way every time
		if strings.EqualFold(f, key) {
			return f
		}
		if d := editDistance(strings.ToLower(key), strings.ToLower(f)); d < bestD && d <= max(1, len(key)/3) {
			best, bestD = f, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe is how a problem names a value: a scalar quoted as the file
// has it, a list or a mapping by what it is.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "*" + n.Value
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 || n.Tag == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// leadingPath matches the key path a validation message begins with:
// "listeners[0]", "http.readHeaderTimeout", "routes[2].backend".
var leadingPath = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]*(\[\d+\])?(\.[a-zA-Z][a-zA-Z0-9]*(\[\d+\])?)*`)

// locate returns the problems of err (a validation error, or several
// joined) placed where doc has the key each begins with: the position of
// the deepest key of its path that the file has.
func locate(doc *yaml.Node, err error) []Problem {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []Problem
	for _, e := range errs {
		msg := strings.TrimPrefix(e.Error(), ErrInvalid.Error()+": ")
		p := Problem{Message: msg}
		var n *yaml.Node
		if m := leadingName.FindStringSubmatch(msg); m != nil && doc != nil {
			n = findNamed(doc, m[1]+"s", m[2])
		} else if path := leadingPath.FindString(msg); path != "" && doc != nil {
			n = find(doc, path)
		}
		if n != nil {
			p.Line, p.Column = n.Line, n.Column
		}
		out = append(out, p)
	}
	return out
}

// leadingName matches a validation message about a listener or a backend
// by its name: `listener "web": ...`.
var leadingName = regexp.MustCompile(`^(listener|backend) "([^"]*)"`)

// findNamed returns the item of doc's list key whose name is name.
func findNamed(doc *yaml.Node, key, name string) *yaml.Node {
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != key || doc.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, item := range doc.Content[i+1].Content {
			if item.Kind != yaml.MappingNode {
				continue
			}
			for j := 0; j+1 < len(item.Content); j += 2 {
				if item.Content[j].Value == "name" && item.Content[j+1].Value == name {
					return item
				}
			}
		}
	}
	return nil
}

var pathPart = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9]*)(?:\[(\d+)\])?`)

// find returns the node of doc at path, or of its longest prefix doc has.
func find(doc *yaml.Node, path string) *yaml.Node {
	n, found := doc, (*yaml.Node)(nil)
	for _, part := range strings.Split(path, ".") {
		m := pathPart.FindStringSubmatch(part)
		if m == nil || n.Kind != yaml.MappingNode {
			return found
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == m[1] {
				next = n.Content[i+1]
				found = n.Content[i]
				break
			}
		}
		if next == nil {
			return found
		}
		n = next
		if m[2] != "" {
			i, _ := strconv.Atoi(m[2])
			if n.Kind != yaml.SequenceNode || i >= len(n.Content) {
				return found
			}
			n = n.Content[i]
			found = n
		}
	}
	return found
}
