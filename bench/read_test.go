package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
// loopback and through acpfs, where the grant may only read it: by
// default the daemon serves (and checks) every read the page cache does
// not answer, and keeps the pages between opens; with --passthrough the
// kernel reads the backing file itself. One op is one read through each
// variant.
func BenchmarkSeqRead(b *testing.B) {
	gate(b)
	d := data(b)
	lb := mountLoopback(b, d.folder, true)
	af, ad := mountACPFS(b, d.folder, grantFile(d, "G-all"))
	ap, pd := mountACPFS(b, d.folder, grantFile(d, "G-all"), "--passthrough")
	benchRead(b, []readVariant{
		{"native", filepath.Join(d.folder, roRel), "", nil},
		{"loopback", filepath.Join(lb, roRel), "passthrough", nil},
		{"acpfs-ro", filepath.Join(af, roRel), "read-only for the grant; reads served by the daemon, pages kept between opens (default)", ad},
		{"acpfs-ro --passthrough", filepath.Join(ap, roRel), "read-only for the grant; the kernel reads the backing file", pd},
	})
}

// BenchmarkSeqReadServed reads a file whose every read is served by the
// daemon: in acpfs one the grant may write (no passthrough for it), next
// to the loopback with passthrough disabled.
func BenchmarkSeqReadServed(b *testing.B) {
	gate(b)
	d := data(b)
	lb := mountLoopback(b, d.folder, false)
	af, ad := mountACPFS(b, d.folder, grantFile(d, "G-all"))
	benchRead(b, []readVariant{
		{"loopback-nopassthrough", filepath.Join(lb, rwRel), "CAP_PASSTHROUGH disabled", nil},
		{"acpfs-rw", filepath.Join(af, rwRel), "writable for the grant: no passthrough", ad},
	})
}

// readEveryRunTarget is the issue "Speed on real work"'s floor for the
// default (served) read-only reads, in every round against the native
// read of the same round.
const readEveryRunTarget = 0.95

// roundRatios is the lowest and highest throughput ratio of the rounds
// of a variant against the native read of the same round (the rounds
// take turns, so round i of each came at the same machine state).
func roundRatios(native, s []time.Duration) (lo, hi float64) {
	for i := 0; i < len(native) && i < len(s); i++ {
		x := float64(native[i]) / float64(s[i])
		if i == 0 || x < lo {
			lo = x
		}
		if i == 0 || x > hi {
			hi = x
		}
	}
	return lo, hi
}

type readVariant struct {
	name, path, note string
	daemon           *daemon // acpfs: whose ledger receives the read's hash
}

func benchRead(b *testing.B, rvs []readVariant) {
	size := readSize()
	buf := make([]byte, 1<<20)
	var vs []variant
	for _, rv := range rvs {
		vs = append(vs, variant{name: rv.name, run: func() error { return readFile(rv.path, buf, size) }})
	}
	r := newRunner(vs...)
	// The untimed first read warms the page cache; in acpfs its open
	// starts the background hash of the file, which is let finish before
	// the timed rounds so that it does not take a core from them.
	first := r.warm(b)
	for _, rv := range rvs {
		if rv.daemon != nil {
			_, err := hashedAfter(rv.daemon.ledger, 0, relOf(rv.path), 2*time.Minute)
			require.NoError(b, err)
		}
	}
	b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
		b.SetBytes(size * int64(len(vs)))
		samples := r.rounds(b, 1)
		mbps := map[string]float64{}
		for _, rv := range rvs {
			mbps[rv.name] = float64(size) / median(samples[rv.name]).Seconds() / 1e6
			b.ReportMetric(mbps[rv.name], strings.ReplaceAll(rv.name, " ", "")+"-MB/s")
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
				b.ReportMetric(x, strings.ReplaceAll(rv.name, " ", "")+"-x-native")
				ratio = fmt.Sprintf("%.2fx native", x)
				if strings.HasPrefix(rv.name, "acpfs-ro") {
					notes = append(notes, verdict(x >= 0.9))
				}
			}
			if nat := samples["native"]; len(nat) > 0 && rv.name != "native" {
				lo, hi := roundRatios(nat, samples[rv.name])
				ratio += fmt.Sprintf(" (rounds %.2fx-%.2fx)", lo, hi)
				if rv.name == "acpfs-ro" {
					notes = append(notes, fmt.Sprintf("every round ≥ %.2fx native: %s", readEveryRunTarget, verdict(lo >= readEveryRunTarget)))
				}
			}
			if lb := mbps["loopback-nopassthrough"]; lb > 0 && rv.name == "acpfs-rw" {
				ratio += fmt.Sprintf(", %.2fx loopback", mbps[rv.name]/lb)
			}
			if strings.HasPrefix(rv.name, "acpfs") {
				notes = append(notes, fmt.Sprintf("first read after mount %s (from the disk, through the daemon)", ms(first[rv.name].Round(time.Millisecond))))
			}
			notes = append(notes, fmt.Sprintf("median of %d", len(samples[rv.name])))
			record("read", rv.name, fmt.Sprintf("%.0f MB/s", mbps[rv.name]), ratio, strings.Join(notes, "; "))
		}
	})
}

// relOf is the folder-relative path of a file of a mount or the folder.
func relOf(p string) string {
	for _, rel := range []string{roRel, rwRel, smallRel} {
		if strings.HasSuffix(p, "/"+rel) {
			return rel
		}
	}
	return p
}

// firstOpenRuns is the number of fresh mounts TestFirstOpen opens on.
const firstOpenRuns = 5

// openOnce opens path read-only, as `head -c 100 FILE` would to begin
// with, and closes it; it returns how long the open took.
func openOnce(path string) (time.Duration, error) {
	start := time.Now()
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	return took, syscall.Close(fd)
}

// TestFirstOpen opens the large files once through views mounted afresh,
// each with a ledger of its own, so that no hash of them is known: the
// open returns once the read is recorded, and the hash follows in a
// read_hash record. Then the same files are opened through a view
// mounted again over one of those ledgers, whose hashes it finds beside
// it.
func TestFirstOpen(t *testing.T) {
	gate(t)
	d := data(t)
	size := readSize()
	type sample struct{ open, hash []time.Duration }
	got := map[string]*sample{roRel: {}, rwRel: {}}
	var native []time.Duration
	var lastLedger string
	for i := 0; i < firstOpenRuns; i++ {
		took, err := openOnce(filepath.Join(d.folder, roRel))
		require.NoError(t, err)
		native = append(native, took)
		mnt, dmn := mountACPFS(t, d.folder, grantFile(d, "G-all"))
		for _, rel := range []string{roRel, rwRel} {
			from := fileSize(t, dmn.ledger)
			start := time.Now()
			took, err := openOnce(filepath.Join(mnt, rel))
			require.NoError(t, err)
			line, err := hashedAfter(dmn.ledger, from, rel, 2*time.Minute)
			require.NoError(t, err)
			require.Contains(t, line, `"sha256":"`, "the hash of the read: %s", line)
			got[rel].open = append(got[rel].open, took)
			got[rel].hash = append(got[rel].hash, time.Since(start))
		}
		dmn.Close()
		lastLedger = dmn.ledger
	}
	// Mounted again over the last ledger: the hashes are known at once.
	var again []time.Duration
	for i := 0; i < firstOpenRuns; i++ {
		mnt, dmn := mountACPFSLedger(t, d.folder, grantFile(d, "G-all"), lastLedger)
		from := fileSize(t, dmn.ledger)
		took, err := openOnce(filepath.Join(mnt, roRel))
		require.NoError(t, err)
		again = append(again, took)
		b, err := os.ReadFile(dmn.ledger)
		require.NoError(t, err)
		require.Contains(t, string(b[from:]), `"sha256":"`, "the read record carries the stored hash")
		dmn.Close()
	}
	gib := fmt.Sprintf("%d MiB", size>>20)
	record("firstopen", "native open", "median "+ms(median(native)), "", fmt.Sprintf("%d opens", len(native)))
	for _, rel := range []string{roRel, rwRel} {
		what := "read-only for the grant"
		if rel == rwRel {
			what = "writable for the grant"
		}
		med := median(got[rel].open)
		record("firstopen", fmt.Sprintf("acpfs, first open after mount, %s file %s", gib, what), "median "+ms(med),
			fmt.Sprintf("max %s", ms(percentile(got[rel].open, 100))),
			fmt.Sprintf("%s; the read is recorded before the open returns, its read_hash %s after the open (median); %d fresh mounts",
				verdict(percentile(got[rel].open, 100) <= 50*time.Millisecond), ms(median(got[rel].hash)), len(got[rel].open)))
	}
	record("firstopen", "acpfs, first open after a remount over the same ledger", "median "+ms(median(again)), "",
		fmt.Sprintf("the hash kept beside the ledger (%s) is in the read record; %d opens", "content-hashes.cache", len(again)))
}
