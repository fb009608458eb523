// Command schemagen writes schema.json, the config file's JSON Schema,
// from the config types and their doc comments: `go generate
// ./internal/config` runs it in that directory.
package main

import (
	"log"
	"os"

	"github.com/baton-proxy/baton/internal/config"
)

func main() {
	docs, err := config.FieldDocs(".")
	if err != nil {
		log.Fatal(err)
	}
	b, err := config.Schema(docs)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("schema.json", b, 0o644); err != nil {
		log.Fatal(err)
	}
}
