package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersionFrom(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-buildmode", Value: "exe"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "1854593ab1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6"},
		{Key: "vcs.time", Value: "2026-12-02T16:55:00Z"},
	}
	modified := append(append([]debug.BuildSetting(nil), vcs...), debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	clean := append(append([]debug.BuildSetting(nil), vcs...), debug.BuildSetting{Key: "vcs.modified", Value: "false"})
	tests := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "unknown (no build information)"},
		{"release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"}, Settings: clean}, true,
			"v1.2.0 (revision 1854593ab1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6, 2026-12-02T16:55:00Z; go1.26.8)"},
		{"modified tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: modified}, true,
			"(devel) (revision 1854593ab1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6, 2026-12-02T16:55:00Z, modified; go1.26.8)"},
		{"no vcs (-buildvcs=false)", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true, "(devel) (go1.26.8)"},
		{"nothing but the module", &debug.BuildInfo{}, true, "(devel)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, versionFrom(tt.info, tt.ok))
		})
	}
}

func TestVersionFlag(t *testing.T) {
	res := runCLI(t, "--version")
	require.NoError(t, res.err)
	assert.Equal(t, "acpfs "+version()+"\n", res.out)

	// -v stays --verbose.
	res = runCLI(t, "-v", "--version")
	require.NoError(t, res.err)
	assert.Equal(t, "acpfs "+version()+"\n", res.out)
	assert.NotNil(t, newRootCmd().PersistentFlags().ShorthandLookup("v"))
	assert.Equal(t, "verbose", newRootCmd().PersistentFlags().ShorthandLookup("v").Name)
}
