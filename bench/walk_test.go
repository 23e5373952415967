package bench

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cacheExpiry is how long a view is left idle before a timed listing of
// the warm benchmark: longer than the 1 s entry and attribute timeouts of
// the loopback, so that its kernel asks the daemon again, as it does for
// an agent that lists from time to time rather than in a tight loop; far
// shorter than acpfs's (fs.CacheTimeout), so that its kernel answers from
// what it kept: "repeated within a minute".
const cacheExpiry = 1100 * time.Millisecond

// walkCount walks dir with WalkDir and lstats every entry, as `ls -lR`
// or `find -ls` do, and returns the number of regular files.
func walkCount(dir string) (int, error) {
	files := 0
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if st.Mode().IsRegular() {
			files++
		}
		return nil
	})
	return files, err
}

// lsLR runs `ls -lR dir` with its output discarded. The child is
// started from this process's working directory, never inside a view.
func lsLR(dir string) error {
	cmd := exec.Command("ls", "-lR", dir)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ls -lR %s: %v: %s", dir, err, stderr.String())
	}
	return nil
}

// BenchmarkList lists the 10,000-file tree natively, through the loopback,
// through acpfs with a grant that reads "**", and through acpfs with a
// 50-rule grant showing the same files, each listing after the last one
// of the same mount was cacheExpiry ago (warm for acpfs, expired for the
// loopback). One op is one listing through each variant, with `ls -lR`
// and with WalkDir + Lstat.
func BenchmarkList(b *testing.B) {
	gate(b)
	d := data(b)
	lb := mountLoopback(b, d.folder, true)
	af, _ := mountACPFS(b, d.folder, grantFile(d, "G-all"))
	ar, _ := mountACPFS(b, d.folder, grantFile(d, "G-rules"))
	require.Equal(b, 50, ruleCount(rulesGrant()))
	roots := []struct{ name, dir string }{
		{"native", filepath.Join(d.folder, treeRel)},
		{"loopback", filepath.Join(lb, treeRel)},
		{"acpfs", filepath.Join(af, treeRel)},
		{"acpfs-50rules", filepath.Join(ar, treeRel)},
	}
	// Every variant must show the whole tree, or the comparison is void.
	for _, r := range roots {
		n, err := walkCount(r.dir)
		require.NoError(b, err)
		require.Equal(b, treeFiles, n, "%s shows %d files", r.name, n)
	}
	// All `ls -lR` first, then all walks: by the time a mount's turn
	// comes again, the others have usually given it its idle time.
	var vs []variant
	for _, method := range []string{"ls-lR", "walk"} {
		for _, r := range roots {
			idle := cacheExpiry
			if r.name == "native" {
				idle = 0 // no caches with a timeout to wait for
			}
			run := func() error { return lsLR(r.dir) }
			if method == "walk" {
				run = func() error {
					n, err := walkCount(r.dir)
					if err == nil && n != treeFiles {
						err = fmt.Errorf("%d files", n)
					}
					return err
				}
			}
			vs = append(vs, variant{name: method + "/" + r.name, resource: r.name, idle: idle, run: run})
		}
	}
	r := newRunner(vs...)
	r.warm(b)
	b.Run(fmt.Sprintf("files=%d", treeFiles), func(b *testing.B) {
		samples := r.rounds(b, 1)
		med := map[string]time.Duration{}
		for _, v := range vs {
			med[v.name] = median(samples[v.name])
			b.ReportMetric(float64(med[v.name])/1e6, v.name+"-ms")
		}
		for _, method := range []string{"ls-lR", "walk"} {
			for _, rt := range roots {
				name := method + "/" + rt.name
				nx := float64(med[name]) / float64(med[method+"/native"])
				ratio := fmt.Sprintf("%.2fx native", nx)
				if lbm := med[method+"/loopback"]; lbm > 0 && rt.name != "native" {
					ratio += fmt.Sprintf(", %.2fx loopback", float64(med[name])/float64(lbm))
				}
				var notes []string
				if strings.HasPrefix(rt.name, "acpfs") {
					b.ReportMetric(nx, name+"-x-native")
					if method == "ls-lR" {
						notes = append(notes, verdict(nx <= 2))
					}
				}
				notes = append(notes, fmt.Sprintf("median of %d", len(samples[name])))
				variantName := rt.name + ", `ls -lR`"
				if method == "walk" {
					variantName = rt.name + ", WalkDir+Lstat"
				}
				record("list", variantName, ms(med[name]), ratio, strings.Join(notes, "; "))
			}
		}
	})
}

// coldRuns is the number of fresh mounts TestListCold lists through.
const coldRuns = 5

// TestListCold lists the tree once through each of a plain loopback and
// two views mounted afresh, so that their kernels keep nothing yet: what
// every listing costs the first time, or after the views dropped their
// kernel caches (a grant change, lost events). The three take turns.
func TestListCold(t *testing.T) {
	gate(t)
	d := data(t)
	kinds := []string{"loopback", "acpfs", "acpfs-50rules"}
	samples := map[string][]time.Duration{}
	for i := 0; i < coldRuns; i++ {
		for _, k := range kinds {
			var mnt string
			var dmn *daemon
			switch k {
			case "loopback":
				mnt, dmn = mountLoopbackDaemon(t, d.folder, true)
			case "acpfs":
				mnt, dmn = mountACPFS(t, d.folder, grantFile(d, "G-all"))
			default:
				mnt, dmn = mountACPFS(t, d.folder, grantFile(d, "G-rules"))
			}
			start := time.Now()
			require.NoError(t, lsLR(filepath.Join(mnt, treeRel)))
			samples[k] = append(samples[k], time.Since(start))
			dmn.Close()
		}
	}
	lbm := median(samples["loopback"])
	for _, k := range kinds {
		m := median(samples[k])
		x := float64(m) / float64(lbm)
		note := fmt.Sprintf("median of %d fresh mounts", len(samples[k]))
		if k != "loopback" {
			note = verdict(x <= 1.1) + "; " + note
		}
		record("listcold", k+", `ls -lR`", ms(m), fmt.Sprintf("%.2fx loopback", x), note)
	}
}
