package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// sandboxWithEnv runs r with extra variables in acpfs run's own
// environment (the caller's shell).
func (e *coordEnv) sandboxWithEnv(r sbxRun, extra ...string) (string, string, int) {
	e.t.Helper()
	return runCmd(e.t, e.command(r, extra...))
}

// TestRunEnvironmentIsChosen: a credential in the caller's environment
// does not reach the command (nor the sandbox's first process, where a
// root command could read it in /proc/1/environ) unless the caller names
// it: --env NAME, --env NAME=VALUE and --env-file pass what they name,
// --inherit-env everything.
func TestRunEnvironmentIsChosen(t *testing.T) {
	e := newSandboxEnv(t)
	const secret = "ACPFS_TEST_SECRET=sk-not-for-agents"
	callerEnv := []string{secret, "ACPFS_TEST_NAMED=named-value", "LC_TIME=C.UTF-8"}
	script := `env; tr '\0' '\n' </proc/1/environ 2>/dev/null; true`

	out, stderr, code := e.sandboxWithEnv(sbxRun{grant: "G-bob", script: script}, callerEnv...)
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, "sk-not-for-agents")
	assert.NotContains(t, out, "ACPFS_TEST_NAMED")
	for _, want := range []string{"PATH=", "LC_TIME=C.UTF-8", "USER=" + reviewer, "LOGNAME=" + reviewer, "TMPDIR=/tmp", "PWD="} {
		assert.Contains(t, "\n"+out, "\n"+want, "the minimal environment has %s", want)
	}
	// A root command may read the first process's environment: it holds
	// none of the caller's either.
	out, stderr, code = e.sandboxWithEnv(sbxRun{grant: "G-bob", flags: []string{"--allow-root"}, script: script}, callerEnv...)
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, "sk-not-for-agents")

	envFile := filepath.Join(t.TempDir(), "agent.env")
	require.NoError(t, os.WriteFile(envFile, []byte("# the agent's settings\n\nFROM_FILE=file-value\nexport QUOTED='two words'\n"), 0o600))
	out, stderr, code = e.sandboxWithEnv(sbxRun{grant: "G-bob", script: script,
		flags: []string{"--env", "ACPFS_TEST_NAMED", "--env", "LITERAL=given=here", "--env", "ACPFS_TEST_UNSET", "--env-file", envFile}},
		callerEnv...)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"ACPFS_TEST_NAMED=named-value", "LITERAL=given=here", "FROM_FILE=file-value", "QUOTED=two words"} {
		assert.Contains(t, "\n"+out, "\n"+want)
	}
	assert.NotContains(t, out, "ACPFS_TEST_UNSET")
	assert.NotContains(t, out, "sk-not-for-agents")

	out, stderr, code = e.sandboxWithEnv(sbxRun{grant: "G-bob", script: "env", flags: []string{"--inherit-env"}}, callerEnv...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, secret)

	// A bad line is refused before anything starts, with where it is.
	require.NoError(t, os.WriteFile(envFile, []byte("OK=1\n  not a variable\n"), 0o600))
	_, stderr, code = e.sandboxWithEnv(sbxRun{grant: "G-bob", script: "echo started", flags: []string{"--env-file", envFile}})
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, envFile+":2:3: want NAME=VALUE")
	_, stderr, code = e.sandboxWithEnv(sbxRun{grant: "G-bob", script: "echo started", flags: []string{"--env", "9BAD=x"}})
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "not a variable name")
	assert.Empty(t, leftoverMounts())
}

// netRecords are the ledger's net_allowed and net_refused records.
func (e *coordEnv) netRecords() []ledger.Record {
	e.t.Helper()
	var out []ledger.Record
	require.NoError(e.t, ledger.Scan(filepath.Join(e.runs, "communication_ledger.jsonl"),
		ledger.Filter{Kinds: []ledger.Kind{ledger.KindNetAllowed, ledger.KindNetRefused}},
		func(r ledger.Record) error { out = append(out, r); return nil }))
	return out
}

// TestRunNetAllowReachesNamedHostsOnly: with --net allow=, a fake model
// API on the host's loopback, named api.test, answers through the proxy
// (HTTPS through CONNECT, SOCKS5 and plain HTTP), while another host, the
// API's name on another port, a wildcard's name that leads to loopback,
// and any direct connection (to the host's
// loopback, or to any address) fail; every connection through the proxy
// is in the ledger with its host name. Without root too, in both uid
// schemes: the proxy runs in the daemon, on the host's network.
func TestRunNetAllowReachesNamedHostsOnly(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxNetAllow(t, newSandboxEnvAs(t, m)) })
}

func sbxNetAllow(t *testing.T, e *coordEnv) {
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "model-api:"+r.URL.Path)
	}))
	defer api.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "plain-api:"+r.URL.Path)
	}))
	defer plain.Close()
	port := api.Listener.Addr().(*net.TCPAddr).Port
	plainPort := plain.Listener.Addr().(*net.TCPAddr).Port

	script := `
try() { name=$1; shift; if out=$("$@" 2>&1); then echo "$name ok $out"; else echo "$name failed $?"; fi; }
try https curl -ksS --max-time 20 https://api.test:$1/v1/messages
try socks curl -ksS --max-time 20 --proxy "$ALL_PROXY" https://api.test:$1/socks
try python /usr/bin/python3 -c 'import ssl, sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], context=ssl._create_unverified_context(), timeout=20).read().decode(), end="")' https://api.test:$1/python
try plain curl -sS --max-time 20 http://plain.test:$2/plain
try other curl -ksS --max-time 20 https://other.test:$1/
try wild curl -ksS --max-time 20 https://x.wild.test:$1/
try otherport curl -ksS --max-time 20 https://api.test:$2/
try direct curl -ksS --max-time 20 --noproxy '*' https://127.0.0.1:$1/
try outside curl -sS --max-time 20 --noproxy '*' http://192.0.2.1/
try devtcp bash -c "exec 3<>/dev/tcp/127.0.0.1/$2"
echo "proxy=$HTTPS_PROXY all=$ALL_PROXY no=$NO_PROXY"
`
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: script, args: []string{fmt.Sprint(port), fmt.Sprint(plainPort)},
		flags: []string{"--net", fmt.Sprintf("allow=api.test:%d", port), "--net", fmt.Sprintf("allow=plain.test:%d,other.test:8443", plainPort),
			"--net", fmt.Sprintf("allow=*.wild.test:%d", port),
			"--resolve", "api.test=127.0.0.1", "--resolve", "plain.test=127.0.0.1", "--resolve", "x.wild.test=127.0.0.1"}})
	require.Equal(t, 0, code, stderr)
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		name, rest, _ := strings.Cut(l, " ")
		lines[name] = rest
	}
	assert.Equal(t, "ok model-api:/v1/messages", lines["https"], out)
	assert.Equal(t, "ok model-api:/socks", lines["socks"], out)
	assert.Equal(t, "ok model-api:/python", lines["python"], out)
	assert.Equal(t, "ok plain-api:/plain", lines["plain"], out)
	for _, refused := range []string{"other", "wild", "otherport", "direct", "outside", "devtcp"} {
		assert.True(t, strings.HasPrefix(lines[refused], "failed"), "%s: %s", refused, lines[refused])
	}
	assert.Contains(t, out, "proxy=http://127.0.0.1:3128 all=socks5h://127.0.0.1:3128 no=localhost,127.0.0.1,::1")
	assertNetAllowRecords(t, e, port, plainPort)
}

// assertNetAllowRecords checks the ledger and the audit of sbxNetAllow's
// run: each proxied connection is a record with its host name, counted
// for bob.
func assertNetAllowRecords(t *testing.T, e *coordEnv, port, plainPort int) {
	recs := e.netRecords()
	var allowed, refused []string
	for _, r := range recs {
		assert.Equal(t, reviewer, r.Agent)
		assert.Equal(t, "G-bob", r.Grant)
		host, _, _ := strings.Cut(r.Detail, ": ")
		if r.Kind == ledger.KindNetAllowed {
			allowed = append(allowed, string(r.Op)+" "+host)
		} else {
			refused = append(refused, string(r.Op)+" "+host)
		}
	}
	// python's CONNECT repeats curl's: counted in a record at the end.
	assert.Equal(t, []string{fmt.Sprintf("connect api.test:%d", port), fmt.Sprintf("socks5 api.test:%d", port),
		fmt.Sprintf("http plain.test:%d", plainPort), fmt.Sprintf("connect api.test:%d", port)}, allowed)
	if assert.NotEmpty(t, recs) {
		last := recs[len(recs)-1]
		assert.Equal(t, ledger.KindNetAllowed, last.Kind)
		assert.Equal(t, int64(1), last.Count)
	}
	assert.Equal(t, []string{fmt.Sprintf("connect other.test:%d", port), fmt.Sprintf("connect x.wild.test:%d", port),
		fmt.Sprintf("connect api.test:%d", plainPort)}, refused)
	// The audit takes them, and counts them for bob.
	out, stderr, code := e.acpfs("audit", "--runs", e.runs, "--format", "json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Agents []struct {
			Agent      string `json:"agent"`
			NetAllowed int64  `json:"net_allowed"`
			NetRefused int64  `json:"net_refused"`
		} `json:"agents"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	var counted bool
	for _, ag := range rep.Agents {
		if ag.Agent == reviewer {
			counted = true
			assert.Equal(t, int64(4), ag.NetAllowed)
			assert.Equal(t, int64(3), ag.NetRefused)
		}
	}
	assert.True(t, counted, out)
	assert.Empty(t, leftoverMounts())
}

// TestRunNetFlags: bad --net values and --resolve without allow are
// refused before anything starts.
func TestRunNetFlags(t *testing.T) {
	e := newSandboxEnv(t)
	for _, tt := range []struct {
		flags []string
		err   string
	}{
		{[]string{"--net", "bridge"}, "want host, none or allow=HOST[:PORT]"},
		{[]string{"--net", "allow=api.test:99999"}, "want 1-65535"},
		{[]string{"--net", "none", "--net", "allow=api.test"}, "give one network mode"},
		{[]string{"--resolve", "api.test=127.0.0.1"}, "--resolve applies to --net allow= only"},
	} {
		_, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: "echo started", flags: tt.flags})
		assert.NotEqual(t, 0, code, tt.flags)
		assert.Contains(t, stderr, tt.err, tt.flags)
	}
}
