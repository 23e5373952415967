package bench

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// openBatch is the number of open+close pairs per variant in one op.
const openBatch = 1000

// openClose opens path read-only and closes it.
func openClose(path string) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return syscall.Close(fd)
}

// mean of a sample.
func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// BenchmarkOpenClose opens and closes a small file the grant may read
// (not write) natively, through the loopback and through acpfs, where
// each open also looks up the file's cached hash and appends a `read`
// record to the ledger. One op is openBatch pairs through each variant.
func BenchmarkOpenClose(b *testing.B) {
	gate(b)
	d := data(b)
	lb := mountLoopback(b, d.folder, true)
	af, _ := mountACPFS(b, d.folder, grantFile(d, "G-all"))
	r := newRunner(
		variant{name: "native", run: func() error { return openClose(filepath.Join(d.folder, smallRel)) }},
		variant{name: "loopback", run: func() error { return openClose(filepath.Join(lb, smallRel)) }},
		variant{name: "acpfs", run: func() error { return openClose(filepath.Join(af, smallRel)) }},
	)
	r.warm(b)
	b.Run("small-file", func(b *testing.B) {
		s := r.rounds(b, openBatch)
		for _, name := range []string{"native", "loopback", "acpfs"} {
			b.ReportMetric(float64(median(s[name])), name+"-ns/open")
		}
		extra := median(s["acpfs"]) - median(s["loopback"])
		b.ReportMetric(float64(extra), "ledger-ns/open")
		for _, name := range []string{"native", "loopback", "acpfs"} {
			ratio := ""
			if name != "native" {
				ratio = fmt.Sprintf("%.2fx loopback", float64(median(s[name]))/float64(median(s["loopback"])))
			}
			note := fmt.Sprintf("mean %.1f µs; %d opens", float64(mean(s[name]))/1e3, len(s[name]))
			if name == "acpfs" {
				note = fmt.Sprintf("%+.1f µs per open against the loopback (hash lookup + ledger record); %s", float64(extra)/1e3, note)
			}
			record("open", name, fmt.Sprintf("median %.1f µs", float64(median(s[name]))/1e3), ratio, note)
		}
	})
}
