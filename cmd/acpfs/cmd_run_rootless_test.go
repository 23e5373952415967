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
			_, err := rootlessUID(tt.uid, tt.allowRoot, t.TempDir(), "G-bob")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
