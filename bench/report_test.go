package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A section of the report: one measurement of the brief, its target and
// how it was taken.
type section struct {
	key, title, method, target string
}

var sections = []section{
	{"append", "`echo >> events.jsonl` through a view",
		"From the benchmark process: open(O_WRONLY|O_APPEND), write one valid event line, close, on a view served by a separate `acpfs mount` process (grant of the owner, ledger sync `batch`), next to the same open, write and close of a plain file through the plain go-fuse loopback (with passthrough, as it ships, and without), all taking turns. Each append is validated, its `append_accepted` record written, then its line, under the lock; the view serves the new protocol.json from memory and writes the file in the background (see \"What is durable when write(2) returns\" in docs/benchmarks.md). The floors show the same append in-process with protocol.json written and fsynced before it returns (the CLI's way), and the fsynced rewrite alone.",
		"< 1 ms median at 100k events, and ≤ 1.2x the loopback's `echo >> file` (passthrough, as it ships)"},
	{"cli", "CLI append (one process per event)",
		"Exec of the command for one valid event on the folder on disk (no view), the two commands taking turns on the same folder; after one untimed run of each (acpfs's first run replays the history and leaves its state cache). `acpfs append` starts from its state cache, reads what was appended since (the reference's line) and writes protocol.json with fsync; the reference replays the whole history every time. The no-state-cache row gives every run an empty ACPFS_STATE_CACHE_DIR: a folder the command has not seen, its whole history replayed. The process start rows time a command that does nothing; the init row attributes its package initialisation (GODEBUG=inittrace=1) to modules.",
		"≥ 10x the reference at 5,000 events, ≥ 100x at 100,000; without a state cache ≥ 15x at 5,000; a trivial command initialises nothing it does not use"},
	{"list", "Listing 10,000 files in 110 directories, repeated within a minute",
		"`ls -lR DIR >/dev/null` (exec) and, in-process, filepath.WalkDir + Lstat of every entry. Each timed listing of a mount comes 1.1 s after its last one: the plain loopback's 1 s entry and attribute caches have expired, acpfs's (10 minutes, dropped by the watcher on every change) have not. The variants take turns; median of the timed rounds.",
		"acpfs `ls -lR` ≤ 2x native"},
	{"grep", "`grep -r` over a source tree",
		"`grep -r -c -F 'func ' DIR` (every file read to its end) over a copy of the first files of $GOROOT/src (ACPFS_BENCH_GREP_FILES, default 2,500; 0 copies all of it), natively, through the plain go-fuse loopback, through the loopback with -keep (the floor: everything kept, one round trip per open) and through a view (grant `**`), the backing files in the page cache. Warm: the same mounts grepped again and again, the variants taking turns (the rounds fill the gaps of the ledger passes below, so they are seconds apart: the loopback's 1 s caches have expired, acpfs's have not). First pass: a loopback and a view mounted afresh each round, unmounted after.",
		"warm ≤ 1.5x native; first pass ≤ 1.0x the loopback"},
	{"git", "`git status` on the source tree",
		"`git status --porcelain` of the same tree, warm (after one untimed run that refreshes the index), the variants taking turns. The git directory is outside the folder (GIT_DIR, GIT_WORK_TREE), one copy per variant so that each index keeps the stat data of its own mount: the view's grant does not name .git, and git reads only the work tree through it.",
		"report"},
	{"grepledger", "Ledger growth over four grep passes",
		"The ledger of a view of its own (default, compact audit level) before each of four `grep -r` passes over the source tree, each starting 10.5 s after the last one ended, so that the 10 s window in which a view's repeated reads are counted into one reads_repeated record has closed (the window is a constant of view/, there is no option to shorten it); the last pass is measured once its window closed, then the daemon is stopped (pending repeats written, end signed). The first pass includes the read_hash records the background hashing adds.",
		"first pass ≤ 3 MB; each repeated pass ≤ 50 KB"},
	{"listcold", "Listing 10,000 files, caches cold",
		"`ls -lR` once through a plain loopback and two views each mounted afresh (nothing cached in the kernel or the daemon), unmounted after; the three take turns.",
		"acpfs ≤ 1.1x the loopback"},
	{"firstopen", "First open of a large file after mount",
		"open(O_RDONLY) and close of the sequential-read files through a view mounted afresh with a ledger of its own (no hash of the file known anywhere), then through views mounted again over that ledger. The read record is in the ledger before the open returns; its `read_hash` follows when the background hash is done (time from the open until the record is in the ledger file).",
		"≤ 50 ms whatever the size"},
	{"read", "Sequential read, warm cache",
		"One file read start to end with read(2) and a 1 MiB buffer, opened and closed each time, the variants taking turns; median of the timed rounds, after one untimed read through each and, in acpfs, once the background hash that read started is done.",
		"acpfs read-only ≥ 90% of native; default (served) read-only ≥ 0.95x native in every round (the ratio column gives the lowest and highest round against the native read of the same round)"},
	{"open", "Ledger cost of an open",
		"open(O_RDONLY)+close of a small file the grant may read but not write, in a loop. In acpfs each open looks up the cached content hash and appends a `read` record to the ledger (sync `batch`), or counts a repeat.",
		""},
	{"ledger", "Ledger growth under repeated reading",
		"`grep -r -c` over one 1,000-file directory of the tree, 100 times, through one `acpfs mount` view with the default (compact) audit level; growth of the ledger file from before the first pass to after the daemon stopped (repeat counts flushed, end signed). The audit over the ledger must name all 1,000 files and count all 100,000 opens.",
		"≤ 3 MB"},
	{"verify", "Ledger verify",
		"`acpfs ledger verify` of a ledger of 1,000,000 read records signed every 1,024 records.",
		"≤ 3 s"},
	{"coord", "Coordinator memory",
		"`acpfs up` with 100 grants (100 participants, ACPFS_BENCH_VIEWS), each view answering a stat, a listing and a read of protocol.json and .acpfs/status; VmRSS and VmHWM from /proc/PID/status. Then every agent, in rounds for 10 s (ACPFS_BENCH_VIEWS_SECONDS) with a 200 ms pause after each (ACPFS_BENCH_VIEWS_PAUSE_MS), reads the end of events.jsonl, appends the next event with echo >>'s calls (the owner's are valid; the 99 others', out of turn, are refused after validation) and reads all 20 files of notes/ through its own view; every append is timed, the daemon's VmRSS sampled every 0.5 s.",
		"≤ 200 MB at 100 views; append p99 ≤ 5 ms with all 100 agents appending and grepping"},
	{"memory", "Daemon memory under load and over a soak",
		"`acpfs up` with 16 grants on a history of 100,000 events (written directly, then `acpfs up` started on it); 16 writers append with echo >>'s calls through the views, eight through the owner's view (valid events racing for each seq) and eight as reviewers (refused), each reading the end of events.jsonl for the next seq; 16 readers read protocol.json, .acpfs/status and the end of events.jsonl, one more reads all of events.jsonl again and again. VmRSS and VmHWM of the daemon from /proc/PID/status every second; the mean VmRSS of the first and the last third of the run, leaving out its first tenth (10 s at most) while the heap reaches its working size. ACPFS_SOAK_SECONDS sets the length (default 60), ACPFS_SOAK_EVENTS the starting history (default 100,000).",
		"≤ 100 MB peak at 100,000 events, the last third within 10% of the first"},
	{"multihost", "Several hosts through NATS JetStream",
		"Three `acpfs up --store` processes on this machine, each with a folder of its own, joined by one JetStream server on loopback (in the benchmark process); eight agents (three, three and two per host) writing as the owner. Latency: `echo >> events.jsonl` (open, write, close) through a view, the appends alternating between two hosts so that each follows one its host learnt of from the store; visibility: from the start of that append until the other host's view shows the line (a read of its events.jsonl, polled every 0.1 ms), and from the start of a write of a document on one host until the other host's view reads its new content. Throughput: the eight agents append for 10 s, each reading the history and appending the next seq; a refusal means another writer took that seq first.",
		""},
	{"startup", "Mount start-up",
		"Exec of `acpfs mount` until a stat of events.jsonl inside the mountpoint succeeds (the daemon has replayed the history and the kernel serves the view); median of the runs.",
		"< 1 s at 100k events"},
}

// result is one row of the report.
type result struct {
	variant, value, ratio, note string
}

var results = struct {
	sync.Mutex
	rows map[string][]result
}{rows: map[string][]result{}}

// record adds a row to a section, replacing an earlier row of the same
// variant (a benchmark body runs once per b.N; the last run counts).
func record(key, variant, value, ratio, note string) {
	results.Lock()
	defer results.Unlock()
	rows := results.rows[key]
	for i, r := range rows {
		if r.variant == variant {
			rows[i] = result{variant, value, ratio, note}
			return
		}
	}
	results.rows[key] = append(rows, result{variant, value, ratio, note})
}

// verdict words a target check for the note column.
func verdict(ok bool) string {
	if ok {
		return "target met"
	}
	return "TARGET MISSED"
}

// writeReport prints the Markdown report to stdout and, when
// ACPFS_BENCH_REPORT names a file, writes it there too.
func writeReport() error {
	results.Lock()
	defer results.Unlock()
	if len(results.rows) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Benchmark results\n\n%s\n", machine())
	for _, s := range sections {
		rows := results.rows[s.key]
		if len(rows) == 0 {
			continue
		}
		title := s.title
		if s.key == "read" {
			title = fmt.Sprintf("%s (%d MiB file)", title, readSize()>>20)
		}
		fmt.Fprintf(&b, "\n### %s\n\n%s", title, s.method)
		if s.target != "" {
			fmt.Fprintf(&b, " Target: %s.", s.target)
		}
		b.WriteString("\n\n| variant | result | ratio | note |\n|---|---:|---:|---|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.variant, r.value, r.ratio, r.note)
		}
	}
	fmt.Fprint(os.Stdout, "\n"+b.String())
	if p := os.Getenv("ACPFS_BENCH_REPORT"); p != "" {
		return os.WriteFile(p, []byte(b.String()), 0o644)
	}
	return nil
}

// machine describes where and how the figures were taken.
func machine() string {
	cpu := firstField("/proc/cpuinfo", "model name")
	mem := firstField("/proc/meminfo", "MemTotal")
	if f := strings.Fields(mem); len(f) == 2 && f[1] == "kB" {
		if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
			mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
		}
	}
	var u syscall.Utsname
	_ = syscall.Uname(&u)
	fuseVersion := goFuseVersion()
	return fmt.Sprintf(`| | |
|---|---|
| date | %s |
| CPU | %s, %d cores |
| memory | %s |
| kernel | Linux %s |
| Go | %s, go-fuse %s |
| filesystem | %s on the backing folder, running as %s |

Each figure comes from one run of scripts/bench.sh: every variant is measured back to back in the same process, so ratios compare the same machine state. "native" is the backing folder itself; "loopback" is the plain go-fuse loopback (fs.NewLoopbackRoot, the defaults fs.Mount applies to nil options, passthrough on as root) in its own process (bench/loopback); "acpfs" is `+"`acpfs mount`"+` in its own process. The benchmark process only issues system calls.
`, time.Now().UTC().Format("2006-01-02 15:04 UTC"), cpu, runtime.NumCPU(), mem, utsString(u.Release[:]),
		runtime.Version(), fuseVersion, fsType(tmpRoot), whoami())
}

// goFuseVersion reads the go-fuse version from the module's go.mod (test
// binaries carry no dependency list in their build info).
func goFuseVersion() string {
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/hanwen/go-fuse/v2" {
			return f[1]
		}
	}
	return "?"
}

func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func utsString(b []int8) string {
	var out []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// fsType names the filesystem holding p, from /proc/self/mounts (the
// longest mountpoint that contains it).
func fsType(p string) string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "?"
	}
	defer f.Close()
	best, typ := "", "?"
	s := bufio.NewScanner(f)
	for s.Scan() {
		fl := strings.Fields(s.Text())
		if len(fl) < 3 {
			continue
		}
		mp := fl[1]
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, typ = mp, fl[2]
		}
	}
	return typ
}

func whoami() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	return fmt.Sprintf("uid %d", os.Geteuid())
}

// Small helpers for figures.

func median(d []time.Duration) time.Duration { return percentile(d, 50) }

// percentile of a sample (nearest rank); it sorts a copy.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p/100*float64(len(s))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

// ms formats a duration in milliseconds with about four significant
// digits.
func ms(d time.Duration) string {
	v := float64(d) / 1e6
	switch {
	case v < 10:
		return fmt.Sprintf("%.3f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}
