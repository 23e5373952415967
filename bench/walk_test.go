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

// cacheExpiry is how long a view is left idle before a timed listing:
// longer than the 1 s entry and attribute timeouts of both the loopback
// and acpfs, so the kernel asks the daemon again, as it does for an agent
// that lists from time to time rather than in a tight loop.
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
// 50-rule grant showing the same files. One op is one listing through
// each variant, with `ls -lR` and with WalkDir + Lstat.
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
				ratio := ""
				if lbm := med[method+"/loopback"]; lbm > 0 && rt.name != "native" {
					x := float64(med[name]) / float64(lbm)
					ratio = fmt.Sprintf("%.2fx loopback", x)
					if strings.HasPrefix(rt.name, "acpfs") {
						b.ReportMetric(x, name+"-x-loopback")
					}
				}
				if nm := med[method+"/native"]; nm > 0 {
					if ratio != "" {
						ratio += ", "
					}
					ratio += fmt.Sprintf("%.1fx native", float64(med[name])/float64(nm))
				}
				var notes []string
				if strings.HasPrefix(rt.name, "acpfs") && method == "ls-lR" {
					x := float64(med[name]) / float64(med[method+"/loopback"])
					notes = append(notes, verdict(x <= 1.3))
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
