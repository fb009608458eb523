package config

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
)

//go:generate go run ./schemagen

// SchemaJSON is the JSON Schema of the config file (schema.json, made by
// `go generate ./internal/config` from the config types and their doc
// comments; TestSchemaUpToDate holds it to them). Editors validate and
// complete a config with it: yaml-language-server reads the modeline
// `# yaml-language-server: $schema=PATH`. `baton config schema` prints it.
//
//go:embed schema.json
var SchemaJSON []byte

// SchemaID is where the schema is published, its $id.
const SchemaID = "https://raw.githubusercontent.com/baton-proxy/baton/main/internal/config/schema.json"

// enums are the values of the keys that take one of a few words.
var enums = map[string][]string{
	"Listener.Protocol":      {ProtocolHTTP, ProtocolTCP},
	"ListenerTLS.Mode":       {TLSTerminate, TLSPassthrough},
	"ListenerTLS.MinVersion": {"1.2", "1.3"},
	"Backend.Protocol":       {ProtocolHTTP1, ProtocolH2C, ProtocolH2},
	"KubeService.Mode":       {ModeEndpoints, ModeClusterIP},
}

// Schema returns the JSON Schema (draft 2020-12) of the config file, with
// docs (FieldDocs) as the descriptions of its keys.
func Schema(docs map[string]string) ([]byte, error) {
	g := &schemaGen{docs: docs, defs: map[string]any{}}
	root := g.object(reflect.TypeFor[Config]())
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = SchemaID
	root["title"] = "baton config"
	root["$defs"] = g.defs
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return append(b, '\n'), nil
}

type schemaGen struct {
	docs map[string]string
	defs map[string]any
}

var (
	durationType = reflect.TypeFor[Duration]()
	sizeType     = reflect.TypeFor[Size]()
	portType     = reflect.TypeFor[Port]()
)

// of returns the schema of a value of type t.
func (g *schemaGen) of(t reflect.Type) map[string]any {
	switch t {
	case durationType:
		return map[string]any{"type": "string", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`, "examples": []string{"10s", "1m30s", "500ms"}}
	case sizeType:
		return map[string]any{"anyOf": []any{
			map[string]any{"type": "integer", "minimum": 0},
			map[string]any{"type": "string", "pattern": `^[0-9]+ ?(B|KiB|MiB|GiB|kB|KB|MB|GB|k|K|m|M|g|G)?$`},
		}, "examples": []any{"1MiB", 65536}}
	case portType:
		return map[string]any{"anyOf": []any{
			map[string]any{"type": "integer", "minimum": 1, "maximum": 65535},
			map[string]any{"type": "string", "minLength": 1},
		}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.of(t.Elem())
	case reflect.Struct:
		name := t.Name()
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = nil // taken: a type that refers to itself ends here
			g.defs[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/$defs/" + name}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string"}
		}
		return map[string]any{"type": "array", "items": g.of(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.of(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	}
	return map[string]any{}
}

// object is the schema of struct type t: its keys (a field's JSON name;
// none of the fields the config file may not set), no others.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	g.fields(t, props)
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if d := g.docs[t.Name()]; d != "" {
		s["description"] = d
	}
	return s
}

func (g *schemaGen) fields(t reflect.Type, props map[string]any) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || f.Tag.Get("schema") == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			g.fields(f.Type, props)
			continue
		}
		if name == "" {
			name = f.Name
		}
		p := g.of(f.Type)
		if e, ok := enums[t.Name()+"."+f.Name]; ok {
			p = map[string]any{"type": "string", "enum": e}
		}
		if d := g.docs[t.Name()+"."+f.Name]; d != "" {
			// The comment names the field as Go does; the file's reader
			// knows it by its key.
			if rest, ok := strings.CutPrefix(d, f.Name+" "); ok {
				d = name + " " + rest
			}
			if _, isRef := p["$ref"]; isRef {
				p = map[string]any{"allOf": []any{p}} // $ref's siblings are read since 2019-09; some editors still want this
			}
			p["description"] = d
		}
		props[name] = p
	}
}

// FieldDocs reads the doc comments of the config types from the package's
// source in dir: "Type" and "Type.Field" to their text, a paragraph a
// line joined.
func FieldDocs(dir string) (map[string]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	docs := map[string]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("field docs: %w", err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				text := ts.Doc.Text()
				if text == "" && len(gd.Specs) == 1 {
					text = gd.Doc.Text()
				}
				if text != "" {
					docs[ts.Name.Name] = flatten(text)
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, field := range st.Fields.List {
					if field.Doc == nil {
						continue
					}
					for _, n := range field.Names {
						docs[ts.Name.Name+"."+n.Name] = flatten(field.Doc.Text())
					}
				}
			}
		}
	}
	return docs, nil
}

// flatten joins a comment's lines into paragraphs, one a line.
func flatten(text string) string {
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(text), "\n\n") {
		paras = append(paras, strings.Join(strings.Fields(p), " "))
	}
	return strings.Join(paras, "\n")
}
