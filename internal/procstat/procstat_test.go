package procstat

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	rest := " 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 424242 1000 100"
	tests := []struct {
		name  string
		in    string
		want  Stat
		error bool
	}{
		{"plain", "12 (sleep) S" + rest, Stat{State: 'S', Start: 424242}, false},
		{"a name with spaces and parentheses", "12 (a) b) (c) Z" + rest, Stat{State: 'Z', Start: 424242}, false},
		{"stopped", "12 (x) T" + rest, Stat{State: 'T', Start: 424242}, false},
		{"no name", "12 sleep S" + rest, Stat{}, true},
		{"cut short", "12 (sleep) S 1 1", Stat{}, true},
		{"a bad start time", "12 (x) S 1 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 nope", Stat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if tt.error {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	assert.True(t, Stat{State: 'Z'}.Zombie())
	assert.False(t, Stat{State: 'T'}.Zombie())
}

func TestReadSelf(t *testing.T) {
	st, err := Read(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, st.Start)
	assert.Contains(t, "RS", string(st.State))
	_, err = Read(-1)
	assert.Error(t, err)
}
