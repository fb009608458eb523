//go:build tools

// Package h2spec pins h2spec, the HTTP/2 conformance suite
// (github.com/summerwind/h2spec) that integration/h2spec_test.go runs
// against baton. It is a module of its own so that the main module's
// go.mod does not carry it.
package h2spec

import (
	_ "github.com/summerwind/h2spec/cmd/h2spec"
)
