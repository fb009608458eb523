// Command caddy is Caddy, built from the Go module proxy for make bench:
// the Go reverse proxy that users who want one compare baton with first
// (issue 23). scripts/caddybin.sh builds it once into .cache/caddybin.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() { caddycmd.Main() }
