package main

import (
	"bytes"
	"testing"
)

// cliResult is what one in-process run of the CLI produced.
type cliResult struct {
	out, errOut string
	code        int
	err         error
}

// runCLI runs the CLI in-process with the exit-code mapping of execute.
func runCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return cliResult{out: out.String(), errOut: errOut.String(), code: exitCodeOf(err), err: err}
}
