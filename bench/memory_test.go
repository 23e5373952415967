package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
)

const memAgents = 16

// memHistory is the history TestDaemonMemory starts from: 100,000
// events, or ACPFS_SOAK_EVENTS.
func memHistory(tb testing.TB) int {
	if s := os.Getenv("ACPFS_SOAK_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(tb, err, "ACPFS_SOAK_EVENTS")
		return n
	}
	return 100_000
}

// soakDuration is how long TestDaemonMemory keeps the load on
// (ACPFS_SOAK_SECONDS overrides the default minute; the 30-minute soak
// of docs/benchmarks.md is ACPFS_SOAK_SECONDS=1800).
func soakDuration(tb testing.TB) time.Duration {
	if s := os.Getenv("ACPFS_SOAK_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(tb, err, "ACPFS_SOAK_SECONDS")
		return time.Duration(n) * time.Second
	}
	return 60 * time.Second
}

// lastSeq reads the seq of the last line of events.jsonl through a view
// from its last few kilobytes (a whole read of 100,000 events for every
// append would measure the readers, not the daemon).
func lastSeq(p string) (int, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 4096)
	off := max(0, st.Size()-int64(len(buf)))
	n, err := f.ReadAt(buf, off)
	if err != nil && n == 0 {
		return 0, err
	}
	b := bytes.TrimRight(buf[:n], "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	i := bytes.Index(b, []byte(`"seq":`))
	if i < 0 {
		return 0, fmt.Errorf("no seq in the last line of %s", p)
	}
	b = b[i+len(`"seq":`):]
	j := 0
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	return strconv.Atoi(string(b[:j]))
}

// appendLine writes one line with echo >>'s calls and says whether the
// view accepted it.
func appendLine(p string, line []byte) bool {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return false
	}
	_, werr := f.Write(line)
	cerr := f.Close()
	return werr == nil && cerr == nil
}

// memSample is the daemon's memory at one moment of the soak.
type memSample struct {
	at       time.Duration
	rss, hwm int64 // kB
}

// TestDaemonMemory (issue 25, finding 4): `acpfs up` with 16 grants on a
// history of 100,000 events; 16 writers append through the views (eight
// through the owner's, whose appends are valid and race for each seq;
// eight as reviewers, whose appends are refused) while 16 readers read
// protocol.json, .acpfs/status and the end of events.jsonl, and one reads
// all of events.jsonl again and again. The daemon's VmRSS is sampled
// every second; the report gives the peak and the mean RSS of the first
// and last thirds of the run (after a warm-up), which must not differ by
// more than noise.
func TestDaemonMemory(t *testing.T) {
	gate(t)
	root := newDir(t, "mem")
	parts := []string{histOwner, histReviewer}
	for i := 3; i <= memAgents; i++ {
		parts = append(parts, fmt.Sprintf("a%02d", i))
	}
	events := memHistory(t)
	h := newHistory(t, root, events, parts...)
	rd := grants.NewRunDir(filepath.Join(root, "agent_runs"))
	require.NoError(t, rd.Init())
	for _, p := range parts {
		require.NoError(t, rd.SaveGrant(&grants.Grant{
			GrantID: "G-" + p, AgentID: p, Role: "participant", Objective: "Take part",
			MayRead:  []string{"protocol.json", "events.jsonl", "*.md", "deliverables/**"},
			MayWrite: []string{"events.jsonl", "protocol.json", "review.md"},
		}))
	}
	mnts := filepath.Join(root, "views")
	view := map[string]string{}
	var mounts, probes []string
	for _, p := range parts {
		view[p] = filepath.Join(mnts, p)
		mounts = append(mounts, view[p])
		probes = append(probes, filepath.Join(view[p], "protocol.json"))
	}
	d := startDaemon(t, mounts, probes, acpfsBin, "up", "--runs", rd.Root, "--folder", h.folder, "--root", mnts)
	pid := d.PID()
	idle := procStatus(t, pid, "VmRSS", "VmHWM")

	dur := soakDuration(t)
	deadline := time.Now().Add(dur)
	running := func() bool { return time.Now().Before(deadline) }
	var accepted, refused, reads atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < memAgents; w++ {
		agent, from := histOwner, histOwner
		if w >= memAgents/2 {
			agent, from = parts[w], parts[w]
		}
		ev := filepath.Join(view[agent], "events.jsonl")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; running(); i++ {
				seq, err := lastSeq(ev)
				if err != nil {
					continue
				}
				seq++
				line := fmt.Sprintf(`{"seq":%d,"from":%q,"event":%q,"at":%q,"summary":"soak %d.%d","reply_to":%d}`+"\n",
					seq, from, cycleEvent(seq), time.Now().UTC().Format("2006-01-02T15:04:05Z"), w, i, seq-1)
				if appendLine(ev, []byte(line)) {
					accepted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	for _, a := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for running() {
				for _, f := range []string{"protocol.json", ".acpfs/status"} {
					if _, err := os.ReadFile(filepath.Join(view[a], f)); err == nil {
						reads.Add(1)
					}
				}
				if _, err := lastSeq(filepath.Join(view[a], "events.jsonl")); err == nil {
					reads.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for running() {
			if _, err := os.ReadFile(filepath.Join(view[histReviewer], "events.jsonl")); err == nil {
				reads.Add(1)
			}
		}
	}()

	var samples []memSample
	start := time.Now()
	tick := time.NewTicker(time.Second)
	for running() {
		<-tick.C
		st := procStatus(t, pid, "VmRSS", "VmHWM")
		samples = append(samples, memSample{time.Since(start), st["VmRSS"], st["VmHWM"]})
	}
	tick.Stop()
	wg.Wait()
	if p := os.Getenv("ACPFS_HEAP_PROFILE"); p != "" {
		writeDaemonProfile(t, pid, p)
	}
	last, err := lastSeq(filepath.Join(view[histOwner], "events.jsonl"))
	require.NoError(t, err)

	require.NotEmpty(t, samples)
	// The thirds leave out the first seconds, while the heap and the
	// kernel's caches reach their working size (a tenth of the run, at
	// most 10 s): flat means flat after that.
	warm := min(10*time.Second, dur/10)
	steady := samples
	for len(steady) > 3 && steady[0].at < warm {
		steady = steady[1:]
	}
	third := max(1, len(steady)/3)
	mean := func(s []memSample) float64 {
		var sum int64
		for _, x := range s {
			sum += x.rss
		}
		return float64(sum) / float64(len(s)) / 1024
	}
	first, final := mean(steady[:third]), mean(steady[len(steady)-third:])
	peak := float64(samples[len(samples)-1].hwm) / 1024
	growth := (final - first) / first * 100
	for i, s := range samples {
		if i%max(1, len(samples)/20) == 0 || i == len(samples)-1 {
			t.Logf("%6.0fs VmRSS %6.1f MiB VmHWM %6.1f MiB", s.at.Seconds(), float64(s.rss)/1024, float64(s.hwm)/1024)
		}
	}
	note := fmt.Sprintf("%d events at start, %d at the end (%d appends accepted, %d refused), %d reads; idle before the load VmRSS %.1f MiB",
		events, last, accepted.Load(), refused.Load(), reads.Load(), float64(idle["VmRSS"])/1024)
	t.Log(note)
	variant := fmt.Sprintf("16 agents, %d events, %s of load", events, dur)
	record("memory", variant+": peak", fmt.Sprintf("VmHWM %.1f MiB", peak), "", fmt.Sprintf("%s; %s", verdict(peak <= 100), note))
	record("memory", variant+": first third vs last third", fmt.Sprintf("VmRSS %.1f → %.1f MiB (%+.1f%%)", first, final, growth), "",
		fmt.Sprintf("%s; mean of each third after the first %s", verdict(growth < 10), warm))
}

// writeDaemonProfile asks the daemon for a heap profile (SIGUSR2, see
// cmd/acpfs/heapprof.go) and waits until it is written.
func writeDaemonProfile(t *testing.T, pid int, path string) {
	t.Helper()
	os.Remove(path)
	require.NoError(t, syscall.Kill(pid, syscall.SIGUSR2))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			t.Logf("heap profile of the daemon in %s", path)
			return
		} else if !errors.Is(err, os.ErrNotExist) {
			require.NoError(t, err)
		}
		require.True(t, time.Now().Before(deadline), "no heap profile from the daemon")
		time.Sleep(50 * time.Millisecond)
	}
}
