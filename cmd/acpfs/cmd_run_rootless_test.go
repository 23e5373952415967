package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRootlessUIDRefusals(t *testing.T) {
	tests := []struct {
		name      string
		uid       string
		allowRoot bool
		want      string
	}{
		{"no root to give", "", true, "--allow-root: a sandbox built without root has no root to give"},
		{"uid 0", "0", false, "--uid 0: a sandbox built without root runs no command as root"},
		{"not a number", "x", false, `--uid "x": want a numeric uid`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := rootlessUID(tt.uid, "", tt.allowRoot, t.TempDir(), "G-bob")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestCommandNamesUnique: cobra runs the first of two commands of one
// name, silently. The first stage of a rootless run and the helper that
// holds an idmapped mount's user namespace were both "run-userns", so a
// rootless run executed the helper (which waits for its stdin to close
// and exits 0) instead of its daemon.
func TestCommandNamesUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range newRootCmd().Commands() {
		for _, name := range append([]string{c.Name()}, c.Aliases...) {
			assert.False(t, seen[name], "two commands are named %q", name)
			seen[name] = true
		}
	}
}
