package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// initModules are the modules whose packages may run initialisation in
// every acpfs process (GODEBUG=inittrace=1 lists them): the standard
// library, acpfs itself, and the third-party packages its commands link
// whose init cannot be put off (go-fuse's opcode tables and pipe probe,
// the NATS client and what it pulls in, the YAML parser). A library that
// only some commands use, with an init of its own, is kept out of the
// others or made lazy: the cgroup library (with protobuf, ebpf, dbus and
// logrus) used to initialise in every `acpfs append`.
var initModules = []string{
	"github.com/acpfs/acpfs",
	"github.com/bmatcuk/doublestar/v4",
	"github.com/fsnotify/fsnotify",
	"github.com/hanwen/go-fuse/v2",
	"github.com/klauspost/compress",
	"github.com/landlock-lsm/go-landlock",
	"github.com/nats-io/nats.go",
	"github.com/nats-io/nkeys",
	"github.com/nats-io/nuid",
	"github.com/spf13/cobra",
	"github.com/spf13/pflag",
	"go.yaml.in/yaml/v3",
	"golang.org/x/crypto",
	"golang.org/x/sys",
}

// ownInitBytes bounds what each acpfs package may allocate at start: a
// few tables, no compiled patterns or templates (compile those at first
// use, with sync.OnceValue).
const ownInitBytes = 8 << 10

// initLine is one line of the runtime's init trace.
type initLine struct {
	pkg   string
	bytes int64
}

// traceInit runs the CLI with args under GODEBUG=inittrace=1.
func traceInit(t *testing.T, args ...string) []initLine {
	t.Helper()
	cmd := exec.Command(protoBuildCLI(t), args...)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	var out []initLine
	s := bufio.NewScanner(&stderr)
	for s.Scan() {
		// init PKG @T ms, C ms clock, B bytes, A allocs
		f := strings.Fields(s.Text())
		if len(f) < 10 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		n, err := strconv.ParseInt(f[7], 10, 64)
		require.NoError(t, err, s.Text())
		out = append(out, initLine{pkg: f[1], bytes: n})
	}
	require.NotEmpty(t, out, "no init trace: %s", stderr.String())
	return out
}

// moduleOf names the module of an initialised package: "std" for the
// standard library (no dot in its first element), main for acpfs's.
func moduleOf(pkg string) string {
	if pkg == "main" {
		return "github.com/acpfs/acpfs"
	}
	pkg = strings.ReplaceAll(pkg, "%2e", ".")
	if first, _, _ := strings.Cut(pkg, "/"); !strings.Contains(first, ".") {
		return "std"
	}
	for _, m := range initModules {
		if pkg == m || strings.HasPrefix(pkg, m+"/") {
			return m
		}
	}
	return ""
}

// TestProcessStartInitialisesOnlyTheAllowed keeps the start of every
// acpfs process (one `acpfs append` per event) free of the initialisation
// of libraries it does not need.
func TestProcessStartInitialisesOnlyTheAllowed(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"append", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			for _, l := range traceInit(t, args...) {
				m := moduleOf(l.pkg)
				assert.NotEmpty(t, m, "%s initialises in every acpfs process, and its module is not one that may (initModules)", l.pkg)
				if m == "github.com/acpfs/acpfs" {
					assert.LessOrEqual(t, l.bytes, int64(ownInitBytes), "%s allocates %d bytes at start: compile patterns and build big tables at first use", l.pkg, l.bytes)
				}
			}
		})
	}
}

func TestModuleOf(t *testing.T) {
	for pkg, want := range map[string]string{
		"os":                                     "std",
		"vendor/golang.org/x/net/http2/hpack":    "std",
		"main":                                   "github.com/acpfs/acpfs",
		"github.com/acpfs/acpfs/ledger":          "github.com/acpfs/acpfs",
		"github.com/nats-io/nats%2ego":           "github.com/nats-io/nats.go",
		"github.com/nats-io/nats.go/jetstream":   "github.com/nats-io/nats.go",
		"github.com/containerd/cgroups/v3":       "",
		"github.com/hanwen/go-fuse/v2/fuse":      "github.com/hanwen/go-fuse/v2",
		"github.com/hanwen/go-fuse/v2x/whatever": "",
	} {
		assert.Equal(t, want, moduleOf(pkg), pkg)
	}
}
