package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/protocol"
)

// appendBatch is the number of appends per view in one benchmark op.
const appendBatch = 100

// appendLoopbackTarget bounds an append through a view against `echo >>
// file` through the plain loopback (issue "Speed on real work"; 1.5x
// before it).
const appendLoopbackTarget = 1.2

// ownerGrant lets the history's owner append and read the protocol files.
func ownerGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-owner", AgentID: histOwner, Role: "proposal owner", Objective: "Append events",
		MayRead:  []string{"protocol.json", "events.jsonl", "*.md", "deliverables/**"},
		MayWrite: []string{"events.jsonl", "protocol.json", "proposal.md", "decisions.md", "readiness.md", "deliverables/**"},
	}
}

// saveOwnerGrant writes ownerGrant into a fresh run directory and
// returns the grant file.
func saveOwnerGrant(tb testing.TB) string {
	tb.Helper()
	rd := grants.NewRunDir(filepath.Join(newDir(tb, "runs"), "agent_runs"))
	require.NoError(tb, rd.Init())
	g := ownerGrant()
	require.NoError(tb, rd.SaveGrant(g))
	return rd.GrantPath(g.GrantID)
}

// appendEvent does what `echo "$line" >> events.jsonl` does: open with
// O_APPEND, one write, close. A refused event fails the write (EINVAL,
// EPERM) or the close.
func appendEvent(path string, line []byte) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	n, err := syscall.Write(fd, line)
	if err == nil && n != len(line) {
		err = fmt.Errorf("short write %d of %d", n, len(line))
	}
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("append %q: %w", bytes.TrimSpace(line), err)
	}
	return nil
}

// BenchmarkViewAppend appends valid events through two views served by
// separate `acpfs mount` processes, one over a 1,000-event history and
// one over a 100,000-event history, alternating between them. As a floor
// it also appends to a third 1,000-event folder with protocol.Log in this
// process (the same validation, write and protocol.json rewrite, without
// FUSE and ledger). One op is appendBatch appends to each; every append
// is timed on its own.
func BenchmarkViewAppend(b *testing.B) {
	gate(b)
	parent := newDir(b, "append")
	gp := saveOwnerGrant(b)
	type target struct {
		name, label string
		h           *history
		add         func(line []byte) error
	}
	var targets []*target
	for _, n := range []int{1_000, 100_000} {
		h := newHistory(b, parent, n)
		mnt, _ := mountACPFS(b, h.folder, gp)
		path := filepath.Join(mnt, "events.jsonl")
		name := fmt.Sprintf("%dk", n/1000)
		targets = append(targets, &target{name: name, label: name + " events of history", h: h,
			add: func(line []byte) error { return appendEvent(path, line) }})
	}
	// The anchor: the same open, write, close of a plain file through
	// the plain go-fuse loopback (passthrough on, as root), and without
	// passthrough, where the write reaches the daemon as it must for
	// events.jsonl.
	plain := newDir(b, "append-plain")
	for _, lt := range []struct {
		name, label string
		passthrough bool
	}{
		{"loopback", "anchor: `echo >> file` through the plain go-fuse loopback", true},
		{"loopback-nopt", "anchor: `echo >> file` through the loopback without passthrough", false},
	} {
		dir := filepath.Join(plain, lt.name)
		require.NoError(b, os.MkdirAll(dir, 0o755))
		require.NoError(b, os.WriteFile(filepath.Join(dir, "protocol.json"), []byte("{}\n"), 0o644))
		require.NoError(b, os.WriteFile(filepath.Join(dir, "log.jsonl"), nil, 0o644))
		mnt := mountLoopback(b, dir, lt.passthrough)
		path := filepath.Join(mnt, "log.jsonl")
		lh := &history{next: 1}
		targets = append(targets, &target{name: lt.name, label: lt.label, h: lh,
			add: func(line []byte) error { return appendEvent(path, line) }})
	}
	floor := newHistory(b, newDir(b, "append-floor"), 1_000)
	log, err := protocol.OpenLog(floor.folder)
	require.NoError(b, err)
	b.Cleanup(func() { log.Close() })
	targets = append(targets, &target{name: "floor", label: "floor: protocol.Log.AppendLine in-process, 1k, no view", h: floor,
		add: func(line []byte) error {
			_, err := log.AppendLine(bytes.TrimSuffix(line, []byte("\n")), histOwner)
			return err
		}})
	// The disk's share: what rewriting protocol.json alone costs (a temp
	// file written, fsynced and renamed over it), on the same filesystem.
	pj, err := os.ReadFile(filepath.Join(floor.folder, "protocol.json"))
	require.NoError(b, err)
	scratch := newDir(b, "append-disk")
	targets = append(targets, &target{name: "disk", label: "floor: write+fsync+rename of a protocol.json-sized file", h: &history{},
		add: func([]byte) error { return replaceFile(filepath.Join(scratch, "protocol.json"), pj) }})
	for _, t := range targets { // untimed: first open, hash of the history
		require.NoError(b, t.add(t.h.line()))
	}
	b.Run("events=1k,100k", func(b *testing.B) {
		samples := map[string][]time.Duration{}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for j := 0; j < appendBatch; j++ {
				for _, t := range targets {
					line := t.h.line()
					start := time.Now()
					if err := t.add(line); err != nil {
						b.Fatalf("%s: %v", t.name, err)
					}
					samples[t.name] = append(samples[t.name], time.Since(start))
				}
			}
		}
		b.StopTimer()
		med := map[string]time.Duration{}
		for _, t := range targets {
			s := samples[t.name]
			med[t.name] = median(s)
			b.ReportMetric(float64(med[t.name])/1e6, t.name+"-median-ms")
			b.ReportMetric(float64(percentile(s, 95))/1e6, t.name+"-p95-ms")
		}
		x := float64(med["100k"]) / float64(med["1k"])
		b.ReportMetric(x, "100k-x-1k")
		lx := float64(med["100k"]) / float64(med["loopback"])
		b.ReportMetric(lx, "100k-x-loopback")
		for _, t := range targets {
			s := samples[t.name]
			ratio, notes := "", []string{fmt.Sprintf("%d appends, history grew to %d events", len(s), t.h.next-1)}
			switch t.name {
			case "disk":
				notes = []string{fmt.Sprintf("%d rewrites of %d bytes", len(s), len(pj))}
			case "loopback", "loopback-nopt":
				notes = []string{fmt.Sprintf("%d appends of the same lines to a plain file", len(s))}
				ratio = fmt.Sprintf("%.2fx loopback", float64(med[t.name])/float64(med["loopback"]))
			case "1k":
				kx := float64(med[t.name]) / float64(med["loopback"])
				ratio = fmt.Sprintf("%.2fx loopback", kx)
				notes = append([]string{fmt.Sprintf("%s (≤ %.1fx loopback)", verdict(kx <= appendLoopbackTarget), appendLoopbackTarget)}, notes...)
			case "100k":
				ratio = fmt.Sprintf("%.2fx loopback, %.2fx 1k", lx, x)
				notes = append([]string{fmt.Sprintf("%s (< 1 ms, ≤ %.1fx loopback)", verdict(med[t.name] < time.Millisecond && lx <= appendLoopbackTarget), appendLoopbackTarget)}, notes...)
			}
			record("append", t.label, fmt.Sprintf("median %s, p95 %s", ms(med[t.name]), ms(percentile(s, 95))), ratio, strings.Join(notes, "; "))
		}
	})
}

// replaceFile writes data to a temporary file beside path, fsyncs it and
// renames it over path, as protocol.json is replaced after each append.
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// referenceScripts is the directory of the reference implementation's
// scripts when its comparison can run.
func referenceScripts() (string, string) {
	dir := os.Getenv("ACPFS_REFERENCE_SCRIPTS")
	if dir == "" {
		return "", "ACPFS_REFERENCE_SCRIPTS is unset"
	}
	if _, err := exec.LookPath("python3"); err != nil {
		return "", "python3 is missing"
	}
	if _, err := os.Stat(filepath.Join(dir, "append_event.py")); err != nil {
		return "", fmt.Sprintf("no append_event.py in %s", dir)
	}
	return dir, ""
}

// cliRuns is how many timed runs each command gets per history size;
// the reference replays the whole history in every run (most of a second
// at 100,000 events), so it gets fewer.
var cliRuns = map[string]map[int]int{
	"acpfs append":              {5_000: 20, 100_000: 20},
	cliNoStateCache:             {5_000: 20},
	"reference append_event.py": {5_000: 10, 100_000: 4},
}

// cliTargets are the speed-ups over the reference the issue asks for.
var cliTargets = map[int]float64{5_000: 10, 100_000: 100}

// cliNoStateCache is `acpfs append` on a folder it has not seen: every
// run gets an empty state cache directory, so it replays the history as
// an agent's first append on a new host does.
const cliNoStateCache = "acpfs append, no state cache"

// cliNoStateCacheTarget is the speed-up over the reference the issue
// "Speed on real work" asks of it.
const cliNoStateCacheTarget = 15

// execEnv is execQuiet with extra environment variables.
func execEnv(env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// execQuiet runs a command and fails with its output.
func execQuiet(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// timeRuns times n runs of fn.
func timeRuns(t *testing.T, n int, fn func() error) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		require.NoError(t, fn())
		out = append(out, time.Since(start))
	}
	return out
}

// TestCLIAppend appends one event per process to folders on disk of
// 5,000 and 100,000 events with `acpfs append` and, when
// ACPFS_REFERENCE_SCRIPTS names the reference scripts and python3
// exists, with the reference append_event.py, the two taking turns on
// the same folder. It also times the start of each process alone.
func TestCLIAppend(t *testing.T) {
	gate(t)
	ref, why := referenceScripts()
	if ref == "" {
		t.Logf("reference comparison skipped: %s", why)
	}
	startAcpfs := timeRuns(t, 20, func() error { return execQuiet(acpfsBin, "--version") })
	record("cli", "process start: `acpfs --version`", "median "+ms(median(startAcpfs)), "", fmt.Sprintf("%d runs", len(startAcpfs)))
	recordInitTrace(t, "--version")
	if ref != "" {
		startPy := timeRuns(t, 10, func() error { return execQuiet("python3", "-c", "pass") })
		record("cli", "process start: `python3 -c pass`", "median "+ms(median(startPy)), "", fmt.Sprintf("%d runs; python3 as found in PATH", len(startPy)))
	}
	for _, n := range []int{5_000, 100_000} {
		h := newHistory(t, newDir(t, "cli"), n)
		step := func() []string {
			seq := h.next
			h.next++
			return []string{"--folder", h.folder, "--participant", histOwner, "--event", cycleEvent(seq),
				"--summary", "benchmark step", "--reply-to", strconv.Itoa(seq - 1)}
		}
		cmds := map[string]func() error{
			"acpfs append": func() error { return execQuiet(acpfsBin, append([]string{"append"}, step()...)...) },
		}
		names := []string{"acpfs append"}
		if _, ok := cliRuns[cliNoStateCache][n]; ok {
			fresh := filepath.Join(newDir(t, "state-cache"), "none")
			runs := 0
			cmds[cliNoStateCache] = func() error {
				runs++
				dir := fmt.Sprintf("%s-%d", fresh, runs)
				return execEnv([]string{"ACPFS_STATE_CACHE_DIR=" + dir}, acpfsBin, append([]string{"append"}, step()...)...)
			}
			names = append(names, cliNoStateCache)
		}
		if ref != "" {
			script := filepath.Join(ref, "append_event.py")
			cmds["reference append_event.py"] = func() error { return execQuiet("python3", append([]string{script}, step()...)...) }
			names = append(names, "reference append_event.py")
		}
		// Untimed: the first acpfs run replays the history and leaves
		// the state cache the next ones start from.
		for _, name := range names {
			require.NoError(t, cmds[name]())
		}
		samples := map[string][]time.Duration{}
		for i := 0; i < cliRuns["acpfs append"][n]; i++ {
			for _, name := range names {
				if i >= cliRuns[name][n] {
					continue
				}
				start := time.Now()
				require.NoError(t, cmds[name]())
				samples[name] = append(samples[name], time.Since(start))
			}
		}
		size := fmt.Sprintf("%dk events", n/1000)
		acpfsMed := median(samples["acpfs append"])
		for _, name := range names {
			m := median(samples[name])
			ratio, note := "", fmt.Sprintf("%d runs", len(samples[name]))
			if rm := median(samples["reference append_event.py"]); rm > 0 && name == "acpfs append" {
				x := float64(rm) / float64(acpfsMed)
				ratio = fmt.Sprintf("%.1fx faster than the reference", x)
				note = fmt.Sprintf("%s (≥ %.0fx); %s", verdict(x >= cliTargets[n]), cliTargets[n], note)
			}
			if name == cliNoStateCache {
				ratio = fmt.Sprintf("%.2fx acpfs append with its state cache", float64(m)/float64(acpfsMed))
				if rm := median(samples["reference append_event.py"]); rm > 0 {
					x := float64(rm) / float64(m)
					ratio += fmt.Sprintf(", %.1fx faster than the reference", x)
					note = fmt.Sprintf("%s (≥ %dx); %s", verdict(x >= cliNoStateCacheTarget), cliNoStateCacheTarget, note)
				}
				note = "an empty ACPFS_STATE_CACHE_DIR every run (the history replayed); " + note
			}
			record("cli", fmt.Sprintf("%s, %s", name, size), "median "+ms(m), ratio, note)
		}
		if ref == "" {
			record("cli", "reference append_event.py, "+size, "skipped", "", why)
		}
	}
}
