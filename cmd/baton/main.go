// Command baton is a hot-restart manager for network servers: a supervisor
// that owns the listening sockets and hands them to successive generations
// of worker processes, so that a reload drops nothing.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "baton:", err)
		os.Exit(1)
	}
}
