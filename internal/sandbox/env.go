package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// The environment of the command. By default it gets only what
// programs need to run and to talk to a terminal: none of the caller's
// credentials (API keys, tokens, agent sockets) reach an agent unless
// the caller names them.

// BaseEnv are the variables copied from the caller by default, when it
// has them, plus every LC_* variable. HOME is the caller's unless the
// sandbox does not show it (then /tmp); USER and LOGNAME are the agent's
// name; TMPDIR is /tmp, the sandbox's own.
var BaseEnv = []string{"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "COLORTERM", "TZ", "SHELL"}

// DefaultPath is PATH when the caller has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// EnvOptions say which variables the command gets.
type EnvOptions struct {
	// Caller is the caller's environment (os.Environ()).
	Caller []string
	// Inherit gives the command all of Caller (--inherit-env).
	Inherit bool
	// Vars are --env values: NAME (copied from Caller, left out when the
	// caller has none) or NAME=VALUE.
	Vars []string
	// Files are --env-file paths: NAME=VALUE lines, # comments.
	Files []string
	// Agent is the agent's name, for USER and LOGNAME.
	Agent string
}

// BuildEnv is the command's environment: the base (or with Inherit the
// whole caller's environment), then --env-file lines in order, then
// --env values in order, later ones winning. It is sorted by name.
func BuildEnv(o EnvOptions) ([]string, error) {
	caller := map[string]string{}
	for _, kv := range o.Caller {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			caller[k] = v
		}
	}
	env := map[string]string{}
	if o.Inherit {
		for k, v := range caller {
			env[k] = v
		}
	} else {
		for _, k := range BaseEnv {
			if v, ok := caller[k]; ok {
				env[k] = v
			}
		}
		for k, v := range caller {
			if strings.HasPrefix(k, "LC_") {
				env[k] = v
			}
		}
		if _, ok := env["PATH"]; !ok {
			env["PATH"] = DefaultPath
		}
		if o.Agent != "" {
			env["USER"], env["LOGNAME"] = o.Agent, o.Agent
		}
		env["TMPDIR"] = "/tmp"
	}
	for _, f := range o.Files {
		vars, err := ReadEnvFile(f)
		if err != nil {
			return nil, err
		}
		for _, kv := range vars {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	for _, s := range o.Vars {
		k, v, hasValue := strings.Cut(s, "=")
		if err := checkName(k); err != nil {
			return nil, fmt.Errorf("--env %q: %w", s, err)
		}
		if !hasValue {
			cv, ok := caller[k]
			if !ok {
				continue // as docker does: a name the caller has not set is left unset
			}
			v = cv
		}
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// ReadEnvFile reads NAME=VALUE lines: blank lines and lines starting
// with # are skipped, "export " before a name is allowed, and a value
// wholly in matching single or double quotes loses them (nothing else
// is interpreted). A bad line is an error that names the file, the line
// and the column.
func ReadEnvFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--env-file: %w", err)
	}
	defer f.Close()
	return parseEnvFile(path, f)
}

func parseEnvFile(path string, r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		body := strings.TrimLeft(line, " \t")
		col := len(line) - len(body) + 1
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(body, "export "); ok {
			trimmed := strings.TrimLeft(rest, " \t")
			col += len(body) - len(trimmed)
			body = trimmed
		}
		k, v, ok := strings.Cut(body, "=")
		if !ok {
			return nil, fmt.Errorf("--env-file %s:%d:%d: want NAME=VALUE, got %q", path, n, col, line)
		}
		if err := checkName(k); err != nil {
			return nil, fmt.Errorf("--env-file %s:%d:%d: %w", path, n, col+badAt(k), err)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out = append(out, k+"="+v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--env-file %s: %w", path, err)
	}
	return out, nil
}

// checkName accepts a shell variable name: letters, digits and _, not
// starting with a digit.
func checkName(k string) error {
	if k == "" {
		return fmt.Errorf("empty variable name")
	}
	if i := badAt(k); i < len(k) {
		return fmt.Errorf("%q is not a variable name (character %q)", k, k[i])
	}
	return nil
}

// badAt is the index of the first character of k that a variable name
// may not have there (len(k) when there is none).
func badAt(k string) int {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return i
	}
	return len(k)
}

// ProxyEnv are the variables that send the command's HTTP(S) and SOCKS
// clients to the egress proxy at 127.0.0.1:port (--net allow=), in both
// cases, and NODE_USE_ENV_PROXY; the sandbox's own loopback is reached
// directly.
func ProxyEnv(port int) []string {
	http := fmt.Sprintf("http://127.0.0.1:%d", port)
	socks := fmt.Sprintf("socks5h://127.0.0.1:%d", port)
	var out []string
	for _, kv := range [][2]string{{"HTTP_PROXY", http}, {"HTTPS_PROXY", http}, {"ALL_PROXY", socks}, {"NO_PROXY", "localhost,127.0.0.1,::1"}} {
		out = append(out, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	// Recent Node.js versions follow HTTP(S)_PROXY in fetch and http only
	// when asked: agent CLIs written for Node then reach their API.
	return append(out, "NODE_USE_ENV_PROXY=1")
}

// SetEnv is env with vars set (replacing a variable of the same name).
func SetEnv(env, vars []string) []string {
	names := map[string]bool{}
	for _, kv := range vars {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !names[k] {
			out = append(out, kv)
		}
	}
	out = append(out, vars...)
	sort.Strings(out)
	return out
}

// useEnv makes spec's environment this process's own, before anything
// reads it: the command's PATH is where its name is looked up, and what
// commandEnv hands on. The first process itself starts with an empty
// environment, so that /proc/1/environ holds none of the caller's.
func useEnv(spec Spec) {
	os.Clearenv()
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			_ = os.Setenv(k, v)
		}
	}
}
