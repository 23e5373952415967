package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuildEnv(t *testing.T) {
	caller := []string{"PATH=/usr/bin:/bin", "HOME=/home/coord", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "USER=coord",
		"TMPDIR=/home/coord/tmp", "ANTHROPIC_API_KEY=sk-1", "AWS_SECRET_ACCESS_KEY=aws", "SSH_AUTH_SOCK=/run/ssh", "EMPTY="}
	envFile := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(envFile, []byte("FROM_FILE=1\nLANG=fr_FR.UTF-8\n"), 0o600))
	tests := []struct {
		name string
		o    EnvOptions
		want []string
	}{
		{"minimal", EnvOptions{Caller: caller, Agent: "alice"},
			[]string{"HOME=/home/coord", "LANG=C.UTF-8", "LC_ALL=C", "LOGNAME=alice", "PATH=/usr/bin:/bin", "TERM=xterm", "TMPDIR=/tmp", "USER=alice"}},
		{"no PATH", EnvOptions{Caller: []string{"HOME=/h"}},
			[]string{"HOME=/h", "PATH=" + DefaultPath, "TMPDIR=/tmp"}},
		{"named", EnvOptions{Caller: caller, Vars: []string{"ANTHROPIC_API_KEY", "EMPTY", "NOT_SET", "MODEL=opus=4"}, Files: []string{envFile}},
			[]string{"ANTHROPIC_API_KEY=sk-1", "EMPTY=", "FROM_FILE=1", "HOME=/home/coord", "LANG=fr_FR.UTF-8", "LC_ALL=C", "MODEL=opus=4",
				"PATH=/usr/bin:/bin", "TERM=xterm", "TMPDIR=/tmp"}},
		{"--env wins over the file", EnvOptions{Caller: caller, Vars: []string{"LANG=C"}, Files: []string{envFile}},
			[]string{"FROM_FILE=1", "HOME=/home/coord", "LANG=C", "LC_ALL=C", "PATH=/usr/bin:/bin", "TERM=xterm", "TMPDIR=/tmp"}},
		{"inherit", EnvOptions{Caller: caller, Inherit: true, Agent: "alice"}, sorted(caller)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BuildEnv(tt.o)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	_, err := BuildEnv(EnvOptions{Caller: caller, Vars: []string{"BAD-NAME=1"}})
	assert.ErrorContains(t, err, `--env "BAD-NAME=1": "BAD-NAME" is not a variable name (character '-')`)
	_, err = BuildEnv(EnvOptions{Vars: []string{"=x"}})
	assert.ErrorContains(t, err, "empty variable name")
	_, err = BuildEnv(EnvOptions{Files: []string{filepath.Join(t.TempDir(), "missing")}})
	assert.ErrorContains(t, err, "--env-file")
}

func sorted(env []string) []string {
	out := slices.Clone(env)
	slices.Sort(out)
	return out
}

func TestParseEnvFile(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
		err        string
	}{
		{"lines", "# comment\n\n  A=1\nexport B=two words\nC=\"quoted\"\nD='single'\nE=\"open\nF=a=b\r\n",
			[]string{"A=1", "B=two words", "C=quoted", "D=single", "E=\"open", "F=a=b"}, ""},
		{"no equals", "A=1\n  oops\n", nil, "f:2:3: want NAME=VALUE"},
		{"bad name", "A=1\nexport  9A=1\n", nil, "f:2:9: \"9A\" is not a variable name"},
		{"bad character", "MY-VAR=1\n", nil, "f:1:3: \"MY-VAR\" is not a variable name (character '-')"},
		{"empty name", "=1\n", nil, "f:1:1: empty variable name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEnvFile("f", strings.NewReader(tt.text))
			if tt.err != "" {
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestProxyEnv(t *testing.T) {
	env := SetEnv([]string{"HTTPS_PROXY=http://corp:8080", "PATH=/bin"}, ProxyEnv(3128))
	assert.Equal(t, []string{"ALL_PROXY=socks5h://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128", "HTTP_PROXY=http://127.0.0.1:3128",
		"NODE_USE_ENV_PROXY=1", "NO_PROXY=localhost,127.0.0.1,::1", "PATH=/bin", "all_proxy=socks5h://127.0.0.1:3128", "http_proxy=http://127.0.0.1:3128",
		"https_proxy=http://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1"}, env)
}
