package bench

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readFile reads path start to end with read(2) into buf, as cat or dd
// would, and checks that size bytes came back.
func readFile(path string, buf []byte, size int64) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var total int64
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		total += int64(n)
	}
	if total != size {
		return fmt.Errorf("read %d of %d bytes", total, size)
	}
	return nil
}

// nativeMBps is the native throughput of the last BenchmarkSeqRead, the
// reference of BenchmarkSeqReadServed.
var nativeMBps float64

// BenchmarkSeqRead reads a large file sequentially, natively, through the
// loopback and through acpfs, where the grant may only read it: acpfs
// then lets the kernel read the backing file (passthrough). One op is one
// read through each variant.
func BenchmarkSeqRead(b *testing.B) {
	gate(b)
	d := data(b)
	lb := mountLoopback(b, d.folder, true)
	af, _ := mountACPFS(b, d.folder, grantFile(d, "G-all"))
	benchRead(b, []readVariant{
		{"native", filepath.Join(d.folder, roRel), ""},
		{"loopback", filepath.Join(lb, roRel), "passthrough"},
		{"acpfs-ro", filepath.Join(af, roRel), "read-only for the grant: passthrough"},
	})
}

// BenchmarkSeqReadServed reads a file whose every read is served by the
// daemon: in acpfs one the grant may write (no passthrough for it), next
// to the loopback with passthrough disabled.
func BenchmarkSeqReadServed(b *testing.B) {
	gate(b)
	d := data(b)
	lb := mountLoopback(b, d.folder, false)
	af, _ := mountACPFS(b, d.folder, grantFile(d, "G-all"))
	benchRead(b, []readVariant{
		{"loopback-nopassthrough", filepath.Join(lb, rwRel), "CAP_PASSTHROUGH disabled"},
		{"acpfs-rw", filepath.Join(af, rwRel), "writable for the grant: no passthrough"},
	})
}

type readVariant struct{ name, path, note string }

func benchRead(b *testing.B, rvs []readVariant) {
	size := readSize()
	buf := make([]byte, 1<<20)
	var vs []variant
	for _, rv := range rvs {
		vs = append(vs, variant{name: rv.name, run: func() error { return readFile(rv.path, buf, size) }})
	}
	r := newRunner(vs...)
	// The untimed first read warms the page cache and, in acpfs, the
	// content hash of the read record (computed once per file version).
	first := r.warm(b)
	b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
		b.SetBytes(size * int64(len(vs)))
		samples := r.rounds(b, 1)
		mbps := map[string]float64{}
		for _, rv := range rvs {
			mbps[rv.name] = float64(size) / median(samples[rv.name]).Seconds() / 1e6
			b.ReportMetric(mbps[rv.name], rv.name+"-MB/s")
		}
		if v, ok := mbps["native"]; ok {
			nativeMBps = v
		}
		for _, rv := range rvs {
			ratio, notes := "", []string{}
			if rv.note != "" {
				notes = append(notes, rv.note)
			}
			if nativeMBps > 0 {
				x := mbps[rv.name] / nativeMBps
				b.ReportMetric(x, rv.name+"-x-native")
				ratio = fmt.Sprintf("%.2fx native", x)
				if rv.name == "acpfs-ro" {
					notes = append(notes, verdict(x >= 0.9))
				}
			}
			if lb := mbps["loopback-nopassthrough"]; lb > 0 && rv.name == "acpfs-rw" {
				ratio += fmt.Sprintf(", %.2fx loopback", mbps[rv.name]/lb)
			}
			if strings.HasPrefix(rv.name, "acpfs") {
				notes = append(notes, fmt.Sprintf("first read after mount %s (hashes the file once)", ms(first[rv.name].Round(time.Millisecond))))
			}
			notes = append(notes, fmt.Sprintf("median of %d", len(samples[rv.name])))
			record("read", rv.name, fmt.Sprintf("%.0f MB/s", mbps[rv.name]), ratio, strings.Join(notes, "; "))
		}
	})
}

// grantFile is the path of a grant saved in d's run directory.
func grantFile(d *dataset, id string) string {
	return filepath.Join(d.runs, "context_grants", id+".json")
}
