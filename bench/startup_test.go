package bench

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// startupRuns is the number of timed start-ups per history size.
const startupRuns = 5

// TestMountStartup times `acpfs mount` from exec until the view answers
// a stat of events.jsonl, on folders with 1,000 and 100,000 events: the
// daemon replays the whole history before it mounts.
func TestMountStartup(t *testing.T) {
	gate(t)
	parent := newDir(t, "startup")
	gp := saveOwnerGrant(t)
	for _, n := range []int{1_000, 100_000} {
		h := newHistory(t, parent, n)
		var samples []time.Duration
		for i := 0; i < startupRuns; i++ {
			mnt := newDir(t, "mnt-startup")
			ledger := filepath.Join(newDir(t, "ledger"), "communication_ledger.jsonl")
			start := time.Now()
			d := startDaemon(t, []string{mnt}, []string{filepath.Join(mnt, "events.jsonl")}, acpfsBin,
				"mount", "--folder", h.folder, "--grant", gp, "--ledger", ledger, mnt)
			samples = append(samples, time.Since(start))
			d.Close()
		}
		med := median(samples)
		name := fmt.Sprintf("%dk events", n/1000)
		t.Logf("%s: median %s, max %s", name, med, percentile(samples, 100))
		note := fmt.Sprintf("max %s; %d runs", ms(percentile(samples, 100)), len(samples))
		if n == 100_000 {
			note = verdict(med < time.Second) + "; " + note
		}
		record("startup", "`acpfs mount`, "+name, "median "+ms(med), "", note)
	}
}
