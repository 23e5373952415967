package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// initTraceRuns is how many runs the init attribution takes the median
// of, per package.
const initTraceRuns = 10

// initTrace runs the acpfs binary with GODEBUG=inittrace=1 and returns
// the wall-clock time of each package's init, from the runtime's lines
// "init PKG @T ms, C ms clock, B bytes, A allocs".
func initTrace(args ...string) (map[string]time.Duration, error) {
	cmd := exec.Command(acpfsBin, args...)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("acpfs %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	out := map[string]time.Duration{}
	s := bufio.NewScanner(&stderr)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 7 || f[0] != "init" || f[6] != "clock," {
			continue
		}
		v, err := strconv.ParseFloat(f[4], 64)
		if err != nil {
			continue
		}
		out[f[1]] += time.Duration(v * float64(time.Millisecond))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no inittrace lines from acpfs %s", strings.Join(args, " "))
	}
	return out, nil
}

// initGroup is the module (or, for the standard library, "std") a
// package's init is counted under, so that the report names what pulls
// the cost in.
func initGroup(pkg string) string {
	pkg = strings.ReplaceAll(pkg, "%2e", ".")
	parts := strings.Split(pkg, "/")
	if !strings.Contains(parts[0], ".") {
		return "std"
	}
	n := 3
	switch parts[0] {
	case "go.yaml.in", "gopkg.in", "go.uber.org", "go.etcd.io":
		n = 2
	case "google.golang.org":
		n = 2
	case "golang.org":
		n = 3
	}
	if len(parts) < n {
		n = len(parts)
	}
	return strings.Join(parts[:n], "/")
}

// recordInitTrace attributes the init cost of `acpfs ARGS` to modules:
// the median per package over initTraceRuns runs, summed per module.
// A trivial command should initialise nothing it does not use.
func recordInitTrace(t *testing.T, args ...string) {
	t.Helper()
	per := map[string][]time.Duration{}
	var totals []time.Duration
	for i := 0; i < initTraceRuns; i++ {
		m, err := initTrace(args...)
		require.NoError(t, err)
		var sum time.Duration
		for pkg, d := range m {
			per[pkg] = append(per[pkg], d)
			sum += d
		}
		totals = append(totals, sum)
	}
	groups := map[string]time.Duration{}
	count := map[string]int{}
	for pkg, s := range per {
		g := initGroup(pkg)
		groups[g] += median(s)
		count[g]++
	}
	var names []string
	for g := range groups {
		names = append(names, g)
	}
	sort.Slice(names, func(i, j int) bool { return groups[names[i]] > groups[names[j]] })
	var parts []string
	var thirdParty time.Duration
	for _, g := range names {
		if g != "std" && !strings.HasPrefix(g, "github.com/acpfs/") {
			thirdParty += groups[g]
		}
		if len(parts) < 12 {
			parts = append(parts, fmt.Sprintf("%s %s (%d)", g, ms(groups[g]), count[g]))
		}
	}
	cmd := "`acpfs " + strings.Join(args, " ") + "`"
	record("cli", "process start: "+cmd+", package init (GODEBUG=inittrace=1)", "median "+ms(median(totals)),
		fmt.Sprintf("%d packages", len(per)),
		fmt.Sprintf("%s of it in modules outside the standard library and acpfs; by module, median per package summed (packages): %s; %d runs",
			ms(thirdParty), strings.Join(parts, ", "), initTraceRuns))
}
