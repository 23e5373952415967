package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/sandbox"
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
	_, _, err := rootlessUID("", "bogus", false, t.TempDir(), "G-bob")
	assert.ErrorContains(t, err, `--uid-scheme "bogus": want subuid or single`)
}

// TestRefuseRootlessIDMaps: a bind that would need an idmapped mount is
// refused in one line that names the flag, the owner, the agent's uid
// and both ways out; a bind without one passes.
func TestRefuseRootlessIDMaps(t *testing.T) {
	tests := []struct {
		name  string
		binds []sandbox.Bind
		want  string
	}{
		{"nothing mapped", []sandbox.Bind{{Path: "/usr"}, {Path: "/srv/spool", Write: true}}, ""},
		{"--rw", []sandbox.Bind{{Path: "/home/me/.claude", Write: true, IDMap: &sandbox.IDMap{UID: 1000, ToUID: 200816}}},
			"--rw /home/me/.claude: owned by you (uid 1000), and the agent runs as your subordinate uid 200816"},
		{"--home", []sandbox.Bind{{Path: "/home/me", Source: "/home/me/state", Write: true, IDMap: &sandbox.IDMap{UID: 1000, ToUID: 200816}}},
			"--home /home/me/state: owned by you"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := refuseRootlessIDMaps(tt.binds, "agent_runs", "G-bob")
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			for _, way := range []string{"$HOME is agent_runs/homes/G-bob", "--uid-scheme single"} {
				assert.Contains(t, err.Error(), way)
			}
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

// TestRootlessHome: the home is made the caller's at 0700; in the single
// scheme nothing is left to give, in the subuid scheme the daemon gives
// it; a home of another uid that is none of the caller's is refused.
func TestRootlessHome(t *testing.T) {
	dir := filepath.Join(t.TempDir(), sandbox.HomesDir, "G-bob")
	single := sandbox.UserNS{Scheme: sandbox.SchemeSingle, CallerUID: uint32(os.Getuid())}
	give, err := rootlessHome(dir, &single)
	require.NoError(t, err)
	assert.Empty(t, give)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())

	sub := sandbox.UserNS{Scheme: sandbox.SchemeSubUID, CallerUID: uint32(os.Getuid()), HostUID: 4 << 20}
	give, err = rootlessHome(dir, &sub)
	require.NoError(t, err)
	assert.Equal(t, dir, give, "the daemon gives the caller's new home to the agent")
	if os.Getuid() != 0 {
		return // the case below needs a home of another uid
	}
	require.NoError(t, os.Chown(dir, 61999, 61999))
	_, err = rootlessHome(dir, &sub)
	assert.ErrorContains(t, err, "is owned by uid 61999, which this run (uid scheme subuid")
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
