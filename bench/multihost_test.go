package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/natsrv"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/protocol"
)

// benchSpec is a primary deliverable that passes the draft checks.
func benchSpec() string {
	var b strings.Builder
	b.WriteString("# Design Spec\n\nDeliverable type: `design-spec`\nStatus: Draft\n\n")
	for _, s := range []string{"Problem", "Goals", "Non-goals", "Proposed Design", "Interfaces / Contracts", "Failure Modes", "Validation Plan", "Open Questions"} {
		fmt.Fprintf(&b, "## %s\n\nMeasured.\n\n", s)
	}
	return b.String()
}

// TestMultiHost measures a collaboration served from three hosts (three
// `acpfs up --store` on this machine, each with a folder of its own)
// through one JetStream server on loopback.
func TestMultiHost(t *testing.T) {
	if !enabled {
		t.Skip("benchmark harness: run with make bench")
	}
	dir := filepath.Join(tmpRoot, "multihost")
	srv, err := natsrv.Start(natsrv.Config{Name: "bench", Dir: filepath.Join(dir, "nats"), Port: -1})
	require.NoError(t, err)
	defer srv.Shutdown()
	url := srv.ClientURL()

	first := filepath.Join(dir, "init")
	_, err = protocol.Init(protocol.InitOptions{Folder: first, Participants: []string{"alice", "bob"},
		Objective: "Measure acpfs", Completion: []string{"Figures recorded"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	hosts := []string{"ha", "hb", "hc"}
	agents := map[string][]string{}
	for i := range 8 {
		h := hosts[i%3]
		a := fmt.Sprintf("agent%d", i+1)
		agents[h] = append(agents[h], a)
		out, err := exec.Command(acpfsBin, "grant", "create", "--store", url, "--collab", "bench", "--host", h,
			"--folder", first, "--agent", a, "--participant", "alice", "--preset", "owner", "--may-write", "notes/**").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	views := map[string]string{} // agent -> view
	for i, h := range hosts {
		hd := filepath.Join(dir, h)
		folder := filepath.Join(hd, "folder")
		require.NoError(t, os.CopyFS(folder, os.DirFS(first)))
		if i > 0 {
			require.NoError(t, os.Remove(filepath.Join(folder, "events.jsonl")))
		}
		require.NoError(t, os.WriteFile(filepath.Join(folder, "deliverables", "design-spec.md"), []byte(benchSpec()), 0o644))
		require.NoError(t, os.MkdirAll(filepath.Join(folder, "notes"), 0o755))
		root := filepath.Join(hd, "mnt")
		var mounts, ready []string
		for _, a := range agents[h] {
			views[a] = filepath.Join(root, a)
			mounts = append(mounts, views[a])
			ready = append(ready, filepath.Join(root, a, ".acpfs", "status"))
		}
		require.NoError(t, os.MkdirAll(root, 0o755))
		testutil.StartDaemon(t, testutil.DaemonSpec{Bin: acpfsBin, Mounts: mounts, Ready: ready,
			Args: []string{"up", "--store", url, "--collab", "bench", "--host", h, "--runs", filepath.Join(hd, "runs"),
				"--folder", folder, "--root", root}})
	}

	// Cross-host latency: appends alternate between hosts a and b, so
	// every append follows one its host learnt of from the store.
	const rounds = 300
	var cross, visible []time.Duration
	for i := range rounds {
		from, to := views["agent1"], views["agent2"]
		if i%2 == 1 {
			from, to = to, from
		}
		waitSeq(t, from, i+1)
		start := time.Now()
		require.Zero(t, appendDraft(from, i+2, fmt.Sprintf("round %d", i)))
		cross = append(cross, time.Since(start))
		waitSeq(t, to, i+2)
		visible = append(visible, time.Since(start))
	}
	med, p99 := median(cross), percentile(cross, 99)
	record("multihost", "append through a view, hosts alternating", fmt.Sprintf("median %s, p99 %s", ms(med), ms(p99)), "", "")
	med, p99 = median(visible), percentile(visible, 99)
	record("multihost", "append visible in a view on another host", fmt.Sprintf("median %s, p99 %s", ms(med), ms(p99)), "", "from the append's start")

	// A document written on host a, until host b's view shows it.
	var docs []time.Duration
	for i := range 50 {
		body := []byte(fmt.Sprintf("# Note\n\nversion %d\n", i))
		start := time.Now()
		require.NoError(t, os.WriteFile(filepath.Join(views["agent1"], "notes", "n.md"), body, 0o644))
		for {
			got, _ := os.ReadFile(filepath.Join(views["agent2"], "notes", "n.md"))
			if bytes.Equal(got, body) {
				break
			}
			require.Less(t, time.Since(start), 30*time.Second, "document never reached host b")
			time.Sleep(200 * time.Microsecond)
		}
		docs = append(docs, time.Since(start))
	}
	med, p99 = median(docs), percentile(docs, 99)
	record("multihost", "document write visible in a view on another host", fmt.Sprintf("median %s, p99 %s", ms(med), ms(p99)), "", "from the write's start")

	// Throughput: 8 writers over 3 hosts for 10 s.
	const window = 10 * time.Second
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked, refused := 0, 0
	stop := time.Now().Add(window)
	for a, v := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				b, err := os.ReadFile(filepath.Join(v, "events.jsonl"))
				if err != nil {
					continue
				}
				errno := appendDraft(v, bytes.Count(b, []byte("\n"))+1, fmt.Sprintf("%s %d", a, i))
				mu.Lock()
				if errno == 0 {
					acked++
				} else {
					refused++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	record("multihost", "8 writers over 3 hosts", fmt.Sprintf("%.0f appends/s", float64(acked)/window.Seconds()), "",
		fmt.Sprintf("%d accepted, %d refused (seq taken by another writer first)", acked, refused))
}

// waitSeq waits until a view's events.jsonl has n lines.
func waitSeq(t *testing.T, view string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(view, "events.jsonl"))
		if err == nil && bytes.Count(b, []byte("\n")) >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%s never reached %d lines", view, n)
		time.Sleep(100 * time.Microsecond)
	}
}

// appendDraft appends deliverable_drafted seq as alice with echo >>'s calls.
func appendDraft(view string, seq int, summary string) syscall.Errno {
	line := fmt.Sprintf(`{"seq":%d,"from":"alice","event":"deliverable_drafted","at":"%s","summary":%q,"doc":"deliverables/design-spec.md","reply_to":%d,"role":"primary"}`+"\n",
		seq, time.Now().UTC().Format("2006-01-02T15:04:05Z"), summary, seq-1)
	f, err := os.OpenFile(filepath.Join(view, "events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err.(*os.PathError).Err.(syscall.Errno)
	}
	_, werr := f.Write([]byte(line))
	cerr := f.Close()
	for _, e := range []error{werr, cerr} {
		if e != nil {
			if pe, ok := e.(*os.PathError); ok {
				if en, ok := pe.Err.(syscall.Errno); ok {
					return en
				}
			}
			return syscall.EIO
		}
	}
	return 0
}
