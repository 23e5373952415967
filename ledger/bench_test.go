package ledger

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchRecord looks like what the filesystem writes on an open for read.
var benchRecord = Record{
	Kind:   KindRead,
	Agent:  "reviewer",
	Grant:  "G-reviewer",
	Path:   "deliverables/design-spec.md",
	Op:     "open",
	PID:    4242,
	SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
}

var benchModes = []SyncMode{SyncBatch, SyncAlways, SyncOff}

const (
	// benchPerOp records are appended per benchmark iteration, so that the
	// figures mean something even with -benchtime=1x (as `make bench` runs).
	benchPerOp = 1024
	// benchGoroutines append concurrently in BenchmarkAppendParallel, as
	// the filesystem's request handlers do.
	benchGoroutines = 16
)

func reportRecords(b *testing.B) {
	perSec := float64(b.N*benchPerOp) / b.Elapsed().Seconds()
	b.ReportMetric(perSec, "records/s")
	b.ReportMetric(1e9/perSec, "ns/record")
}

// BenchmarkAppend appends from one goroutine: the cost of one record
// including its flock, write(2) and, for always, its fsync.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range benchModes {
		b.Run("sync="+mode.String(), func(b *testing.B) {
			w, err := Open(filepath.Join(b.TempDir(), "l.jsonl"), Options{Sync: mode})
			require.NoError(b, err)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := 0; j < benchPerOp; j++ {
					if _, err := w.Append(benchRecord); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			reportRecords(b)
			require.NoError(b, w.Close())
		})
	}
}

// BenchmarkAppendParallel appends from many goroutines at once: group
// commit shares one flock, write(2) and fsync between them.
func BenchmarkAppendParallel(b *testing.B) {
	for _, mode := range benchModes {
		b.Run("sync="+mode.String(), func(b *testing.B) {
			w, err := Open(filepath.Join(b.TempDir(), "l.jsonl"), Options{Sync: mode})
			require.NoError(b, err)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				for g := 0; g < benchGoroutines; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for j := 0; j < benchPerOp/benchGoroutines; j++ {
							if _, err := w.Append(benchRecord); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			reportRecords(b)
			require.NoError(b, w.Close())
		})
	}
}

// BenchmarkVerify measures a full chain check, per record.
func BenchmarkVerify(b *testing.B) {
	const n = 20000
	path := writeLedger(b, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := Verify(path)
		if err != nil || !rep.OK() {
			b.Fatal(err, rep.Problem)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}

// Figures for BenchmarkVerify1M: a million records of about 330 bytes, a
// signed checkpoint every 1024 and a MAC at the end of each batch of 16,
// as a busy view writes them.
const (
	bench1MRecords    = 1_000_000
	bench1MCheckpoint = 1024
	bench1MBatch      = 16
)

// writeBench1M writes the 1M-record ledger, its ledger.pub and its head.
func writeBench1M(b *testing.B) (path string, size int64) {
	key := testKey(b, 7)
	dir := b.TempDir()
	require.NoError(b, ensurePublic(dir, key))
	path = filepath.Join(dir, "ledger.jsonl")
	f, err := os.Create(path)
	require.NoError(b, err)
	bw := bufio.NewWriterSize(f, 1<<20)
	c := newChain(b, key)
	var head []byte
	for i := 1; i <= bench1MRecords; i++ {
		r, m := benchRecord, sealNone
		r.Path = fmt.Sprintf("deliverables/section-%04d/design-spec.md", i%5000)
		switch {
		case i%bench1MCheckpoint == 0 || i == bench1MRecords:
			r, m = Record{Kind: KindSignedCheckpoint, Detail: "checkpoint"}, sealSig
		case i%bench1MBatch == 0:
			m = sealMAC
		}
		rec, line := c.next(r, m)
		if rec.Kind == KindSignedCheckpoint {
			head = line
		}
		_, err := bw.Write(line)
		require.NoError(b, err)
	}
	require.NoError(b, bw.Flush())
	st, err := f.Stat()
	require.NoError(b, err)
	require.NoError(b, f.Close())
	require.NoError(b, os.WriteFile(HeadPath(path), head, 0o600))
	return path, st.Size()
}

// BenchmarkVerify1M is the target: `acpfs ledger verify` of a
// million records, signatures and head included, in at most 3 s on the
// 2-core development machine. The ledger is written once, outside the
// timing.
func BenchmarkVerify1M(b *testing.B) {
	path, size := writeBench1M(b)
	b.Run("signed", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			rep, err := Verify(path)
			if err != nil || !rep.OK() || !rep.SignaturesChecked || rep.Records != bench1MRecords {
				b.Fatal(err, rep.Problem, rep.SignaturesChecked, rep.Records)
			}
		}
		b.ReportMetric(float64(b.N*bench1MRecords)/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/verify")
	})
}
