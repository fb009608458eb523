// Command baton is a hot-restart manager for network servers: a supervisor
// that owns the listening sockets and hands them to successive generations
// of worker processes, so that a reload drops nothing.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/baton-proxy/baton/internal/config"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		// A config's problems, one a line as a compiler writes them
		// (FILE:LINE:COLUMN: ...), then how many.
		var ps *config.Problems
		if errors.As(err, &ps) {
			fmt.Fprintln(os.Stderr, ps)
			fmt.Fprintf(os.Stderr, "baton: %s\n", ps.Summary())
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "baton:", err)
		os.Exit(1)
	}
}
