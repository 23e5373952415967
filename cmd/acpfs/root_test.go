package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The per-event commands, built alone, are the commands of the whole
// tree: same name, same help, same flags.
func TestPerEventCommandsAlone(t *testing.T) {
	full := newRootCmd()
	var names []string
	for _, c := range commands {
		if c.perEvent != "" {
			names = append(names, c.perEvent)
		}
	}
	assert.ElementsMatch(t, []string{"append", "next", "wait", "validate"}, names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			alone := newRootCmdFor([]string{name, "--help"})
			require.Len(t, alone.Commands(), 1)
			cmd := alone.Commands()[0]
			assert.Equal(t, name, cmd.Name())
			want, _, err := full.Find([]string{name})
			require.NoError(t, err)
			assert.Equal(t, want.UsageString(), cmd.UsageString())
			assert.Equal(t, want.Long, cmd.Long)
		})
	}
}
