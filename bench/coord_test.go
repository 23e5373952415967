package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
)

// coordViews is the number of views (one grant each) of the coordinator
// benchmark: ACPFS_BENCH_VIEWS, default 100.
const coordViewsDefault = 100

// coordLoad is how long every agent of the coordinator benchmark appends
// and greps (ACPFS_BENCH_VIEWS_SECONDS), and coordPause the pause of an
// agent between two rounds (ACPFS_BENCH_VIEWS_PAUSE_MS): an agent works,
// then thinks; 100 agents without a pause would measure the run queue of
// two cores, not the daemon.
const (
	coordLoadDefault  = 10
	coordPauseDefault = 200
	coordNotes        = 20 // files of notes/ each agent greps every round
	// Targets of the issue "Speed on real work" at 100 views.
	coordMemTarget = 200 // MiB
	coordP99Target = 5 * time.Millisecond
)

// procStatus reads fields (in kB) of /proc/PID/status.
func procStatus(tb testing.TB, pid int, keys ...string) map[string]int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(tb, err)
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, want := range keys {
			if k == want {
				f := strings.Fields(v)
				if len(f) > 0 {
					out[k], _ = strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	return out
}

// TestCoordinatorMemory starts `acpfs up` with 100 grants, one per
// participant, waits until every view answers, uses each one a little
// and reads the coordinator's resident memory; then every agent appends
// to events.jsonl and greps notes/ through its view, in rounds, while the
// daemon's memory is sampled, and the append latencies are collected.
func TestCoordinatorMemory(t *testing.T) {
	gate(t)
	views := envInt(t, "ACPFS_BENCH_VIEWS", coordViewsDefault)
	require.GreaterOrEqual(t, views, 2)
	root := newDir(t, "coord")
	parts := []string{histOwner}
	for i := 2; i <= views; i++ {
		parts = append(parts, fmt.Sprintf("p%03d", i))
	}
	// Every participant but the owner reviews the proposal in the
	// opening: the history must be longer than that.
	h := newHistory(t, root, views+50, parts...)
	folder := h.folder
	note := bytes.Repeat([]byte("A line of notes an agent searches through.\n"), 100)
	for _, dir := range []string{"notes", "notes/private"} {
		require.NoError(t, os.MkdirAll(filepath.Join(folder, dir), 0o755))
	}
	for i := 0; i < coordNotes; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(folder, "notes", fmt.Sprintf("n%02d.md", i)), note, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(folder, "notes/private", fmt.Sprintf("n%02d.md", i)), note, 0o644))
	}
	rd := grants.NewRunDir(filepath.Join(root, "agent_runs"))
	require.NoError(t, rd.Init())
	for _, p := range parts {
		require.NoError(t, rd.SaveGrant(&grants.Grant{
			GrantID: "G-" + p, AgentID: p, Role: "participant", Objective: "Take part",
			MayRead:       []string{"protocol.json", "events.jsonl", "*.md", "deliverables/**", "notes/**"},
			ForbiddenRead: []string{"notes/private/**"},
			MayWrite:      []string{"events.jsonl", "protocol.json", "review.md", "notes/" + p + "/**"},
		}))
	}
	mnts := filepath.Join(root, "views")
	var mounts, probes []string
	for _, p := range parts {
		mounts = append(mounts, filepath.Join(mnts, p))
		probes = append(probes, filepath.Join(mnts, p, "protocol.json"))
	}
	start := time.Now()
	d := startDaemon(t, mounts, probes, acpfsBin, "up", "--runs", rd.Root, "--folder", folder, "--root", mnts)
	ready := time.Since(start)
	for _, m := range mounts {
		_, err := os.ReadDir(m)
		require.NoError(t, err)
		for _, f := range []string{"protocol.json", ".acpfs/status"} {
			_, err := os.ReadFile(filepath.Join(m, f))
			require.NoError(t, err)
		}
	}
	st := procStatus(t, d.PID(), "VmRSS", "VmHWM", "Threads")
	rss, hwm := float64(st["VmRSS"])/1024, float64(st["VmHWM"])/1024
	t.Logf("acpfs up, %d views: ready in %s, VmRSS %.1f MiB, VmHWM %.1f MiB, %d threads", views, ready, rss, hwm, st["Threads"])
	name := fmt.Sprintf("acpfs up, %d views", views)
	record("coord", name+", idle", fmt.Sprintf("VmRSS %.1f MiB, VmHWM %.1f MiB", rss, hwm), "",
		fmt.Sprintf("%s (≤ %d MiB); all %d views answered %s after exec; %d threads", verdict(hwm <= coordMemTarget), coordMemTarget, views, ms(ready), st["Threads"]))
	coordLoad(t, d.PID(), name, mnts, parts)
}

// coordLoad has every agent append (the owner's appends are valid and
// race with nobody; the others', as participants out of turn, are
// refused after validation) and grep notes/ through its own view, with a
// pause between rounds, and reports the latency of the appends and the
// daemon's memory meanwhile.
func coordLoad(t *testing.T, pid int, name, mnts string, parts []string) {
	t.Helper()
	dur := time.Duration(envInt(t, "ACPFS_BENCH_VIEWS_SECONDS", coordLoadDefault)) * time.Second
	pause := time.Duration(envInt(t, "ACPFS_BENCH_VIEWS_PAUSE_MS", coordPauseDefault)) * time.Millisecond
	deadline := time.Now().Add(dur)
	lat := make([][]time.Duration, len(parts))
	ok := make([][]time.Duration, len(parts))
	var greps atomic.Int64
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			view := filepath.Join(mnts, p)
			ev := filepath.Join(view, "events.jsonl")
			// Agents start spread over one pause, not all at once.
			time.Sleep(pause * time.Duration(i) / time.Duration(len(parts)))
			for r := 0; time.Now().Before(deadline); r++ {
				seq, err := lastSeq(ev)
				if err == nil {
					seq++
					line := fmt.Sprintf(`{"seq":%d,"from":%q,"event":%q,"at":%q,"summary":"load %d.%d","reply_to":%d}`+"\n",
						seq, p, cycleEvent(seq), time.Now().UTC().Format("2006-01-02T15:04:05Z"), i, r, seq-1)
					start := time.Now()
					accepted := appendLine(ev, []byte(line))
					took := time.Since(start)
					lat[i] = append(lat[i], took)
					if accepted {
						ok[i] = append(ok[i], took)
					}
				}
				if grepNotes(filepath.Join(view, "notes")) == nil {
					greps.Add(1)
				}
				time.Sleep(pause)
			}
		}()
	}
	var peakRSS int64
	tick := time.NewTicker(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		<-tick.C
		if st := procStatus(t, pid, "VmRSS"); st["VmRSS"] > peakRSS {
			peakRSS = st["VmRSS"]
		}
	}
	tick.Stop()
	wg.Wait()
	st := procStatus(t, pid, "VmRSS", "VmHWM", "Threads")
	var all, acc []time.Duration
	for i := range parts {
		all = append(all, lat[i]...)
		acc = append(acc, ok[i]...)
	}
	require.NotEmpty(t, all)
	hwm := float64(st["VmHWM"]) / 1024
	record("coord", name+", all agents appending and grepping: memory", fmt.Sprintf("VmHWM %.1f MiB", hwm), "",
		fmt.Sprintf("%s (≤ %d MiB); highest VmRSS sampled %.1f MiB; %d threads at the end", verdict(hwm <= coordMemTarget), coordMemTarget, float64(peakRSS)/1024, st["Threads"]))
	p99 := percentile(all, 99)
	record("coord", name+", all agents appending and grepping: append latency", "p99 "+ms(p99),
		fmt.Sprintf("median %s, max %s", ms(median(all)), ms(percentile(all, 100))),
		fmt.Sprintf("%s (p99 ≤ %s); %d appends (%d accepted: p99 %s, median %s), %d greps of notes/ (%d files) in %s, each agent pausing %s between rounds",
			verdict(p99 <= coordP99Target), ms(coordP99Target), len(all), len(acc), ms(percentile(acc, 99)), ms(median(acc)), greps.Load(), coordNotes, dur, pause))
}

// grepNotes reads every file under dir, as `grep -r` does, looking for
// a word.
func grepNotes(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		_ = bytes.Contains(b, []byte("searches"))
	}
	return nil
}
