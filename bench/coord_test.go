package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/protocol"
)

const coordViews = 50

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

// TestCoordinatorMemory starts `acpfs up` with 50 grants, one per
// participant, waits until every view answers, uses each one a little
// and reads the coordinator's resident memory.
func TestCoordinatorMemory(t *testing.T) {
	gate(t)
	root := newDir(t, "coord")
	var parts []string
	for i := 1; i <= coordViews; i++ {
		parts = append(parts, fmt.Sprintf("p%02d", i))
	}
	folder := filepath.Join(root, "collab")
	_, err := protocol.Init(protocol.InitOptions{
		Folder: folder, Participants: parts, Objective: "Measure the coordinator",
		Completion: []string{"Figures recorded"}, PrimaryType: "design-spec",
	})
	require.NoError(t, err)
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
	t.Logf("acpfs up, %d views: ready in %s, VmRSS %.1f MiB, VmHWM %.1f MiB, %d threads", coordViews, ready, rss, hwm, st["Threads"])
	record("coord", "acpfs up, 50 views", fmt.Sprintf("VmRSS %.1f MiB, VmHWM %.1f MiB", rss, hwm), "",
		fmt.Sprintf("%s; all 50 views answered %s after exec; %d threads", verdict(hwm < 300), ms(ready), st["Threads"]))
}
