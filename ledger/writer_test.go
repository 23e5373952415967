package ledger

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/digest"
)

func TestParseSyncMode(t *testing.T) {
	tests := []struct {
		in   string
		want SyncMode
		err  bool
	}{
		{"always", SyncAlways, false},
		{"batch", SyncBatch, false},
		{"", SyncBatch, false},
		{"OFF", SyncOff, false},
		{"sometimes", SyncBatch, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSyncMode(tt.in)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			again, err := ParseSyncMode(got.String())
			require.NoError(t, err)
			assert.Equal(t, got, again)
		})
	}
}

// TestAppendChainV2: a writer of version 2 files (as acpfs continues
// one it finds) writes them as before.
func TestAppendChainV2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	w, err := Open(path, Options{Sync: SyncAlways, Clock: fixedClock(), version: Version2})
	require.NoError(t, err)
	assert.Equal(t, path, w.Path())

	r1, err := w.Append(Record{Kind: KindMountStarted, Agent: "a", Seq: 99, Prev: "forged", Hash: "forged", At: "yesterday"})
	require.NoError(t, err)
	assert.Equal(t, int64(1), r1.Seq)
	assert.Equal(t, "", r1.Prev, "the first record has an empty prev")
	assert.Equal(t, "2026-03-01T12:00:00.001000000Z", r1.At)
	assert.Len(t, r1.Hash, 64)
	want, err := HashRecord(r1)
	require.NoError(t, err)
	assert.Equal(t, want, r1.Hash)

	r2, err := w.Append(Record{Kind: KindRead, Agent: "a", Path: "docs/<b>&.md", Detail: "x"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), r2.Seq)
	assert.Equal(t, r1.Hash, r2.Prev)
	require.NoError(t, w.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, lines, 3, "two records and the closing checkpoint")
	assert.Contains(t, lines[1], `"path":"docs/<b>&.md"`, "no HTML escaping")
	// The chain rule as documented: hash of the line with the hash value emptied.
	for n, line := range lines {
		i := strings.LastIndex(line, `"hash":"`) + len(`"hash":"`)
		assert.Equal(t, line[i:i+64], digest.Bytes([]byte(line[:i]+`"}`)), "line %d", n+1)
	}
	assert.Equal(t, `{"seq":1,"version":2,"at":"2026-03-01T12:00:00.001000000Z","kind":"mount_started","agent":"a","key":"`+r1.Key+`","mac":"`+r1.MAC+`","prev":"","hash":"`+r1.Hash+`"}`, lines[0])
	assert.Len(t, r1.MAC, 64, "the last record of a batch carries the batch MAC")
	assert.NotEmpty(t, r1.Key)

	// Reopening continues the chain, in the file's version.
	w, err = Open(path, Options{Sync: SyncBatch})
	require.NoError(t, err)
	r3, err := w.Append(Record{Kind: KindList, Agent: "a"})
	require.NoError(t, err)
	assert.Equal(t, int64(4), r3.Seq, "after the closing checkpoint")
	require.NoError(t, w.Close())
	assertValid(t, path, 3)
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	lines = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	assert.Contains(t, lines[3], `"key":"`+r3.Key+`","mac":"`)
	assert.Contains(t, lines[3], `"prev":"`+r3.Prev+`","hash":"`+r3.Hash+`"}`)
}

func TestAppendRejectsBadRecordsOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	w, err := Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	_, err = w.Append(Record{Agent: "a"})
	require.ErrorContains(t, err, "no kind")
	r, err := w.Append(Record{Kind: KindRead, Path: "bad\xffname", Detail: strings.Repeat("é", maxDetailBytes)})
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.Seq)
	assert.Equal(t, "bad\uFFFDname", r.Path)
	assert.Less(t, len(r.Detail), maxDetailBytes+64)
	assert.Contains(t, r.Detail, "bytes cut]")
	require.NoError(t, w.Close())
	_, err = w.Append(Record{Kind: KindRead})
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, w.Close(), ErrClosed)
	require.ErrorIs(t, w.Sync(), ErrClosed)
	assertValid(t, path, 1)
}

func TestSyncModes(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncBatch, SyncOff} {
		t.Run(mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.jsonl")
			w, err := Open(path, Options{Sync: mode, BatchInterval: time.Millisecond, BatchRecords: 3})
			require.NoError(t, err)
			for i := 0; i < 10; i++ {
				_, err := w.Append(Record{Kind: KindRead, Path: fmt.Sprint(i)})
				require.NoError(t, err)
				// Written before Append returns, whatever the mode.
				st, err := os.Stat(path)
				require.NoError(t, err)
				assert.Positive(t, st.Size())
			}
			require.NoError(t, w.Sync())
			require.NoError(t, w.Close())
			assertValid(t, path, 10)
		})
	}
	_, err := Open(filepath.Join(t.TempDir(), "l"), Options{Sync: SyncMode(7)})
	require.Error(t, err)
}

func TestConcurrentGoroutines(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.jsonl")
			w, err := Open(path, Options{Sync: mode})
			require.NoError(t, err)
			const goroutines, each = 8, 100
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						_, err := w.Append(Record{Kind: KindRead, Agent: fmt.Sprint("g", g), Detail: fmt.Sprint(i)})
						assert.NoError(t, err)
					}
				}()
			}
			wg.Wait()
			require.NoError(t, w.Close())
			assertValid(t, path, goroutines*each)
			assertEachOnce(t, path, goroutines, each, "g")
		})
	}
}

// Two Writers on one file in one process: each must notice the other's
// appends (flock is per open file description).
func TestTwoWritersOneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	w1, err := Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	w2, err := Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		w := w1
		if i%3 == 0 {
			w = w2
		}
		r, err := w.Append(Record{Kind: KindRead, Detail: fmt.Sprint(i)})
		require.NoError(t, err)
		assert.Equal(t, int64(i+1), r.Seq)
	}
	require.NoError(t, w1.Close())
	require.NoError(t, w2.Close())
	assertValid(t, path, 50)
}

func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "l.jsonl")
	const procs, each = 4, 200
	cmds := make([]*exec.Cmd, procs)
	for p := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"=append", envPath+"="+path,
			envCount+"="+fmt.Sprint(each), envName+"="+fmt.Sprint("p", p), envSync+"=batch")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		cmds[p] = cmd
		t.Cleanup(func() {
			if stderr.Len() > 0 {
				t.Logf("child %d: %s", p, stderr.String())
			}
		})
	}
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait())
	}
	assertValid(t, path, procs*each)
	assertEachOnce(t, path, procs, each, "p")
}

// A writer killed with SIGKILL at a random point never leaves a ledger
// that the next writer cannot continue: either the chain is whole, or the
// torn tail is cut and a repair record says so.
func TestCrashThenReopen(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "l.jsonl")
	for round := 0; round < 4; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"=forever", envPath+"="+path, envName+"=crash", envSync+"=off")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		br := bufio.NewReader(out)
		ready, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, childReady, ready)
		// Killed at a different point each round: after round+1
		// progress lines, while it goes on appending.
		for i := 0; i <= round; i++ {
			_, err := br.ReadString('\n')
			require.NoError(t, err)
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()

		if round%2 == 1 {
			// Simulate a write cut short by the crash.
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.WriteString(`{"seq":99999,"at":"2026-`)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
		w, err := Open(path, Options{Sync: SyncAlways})
		require.NoError(t, err)
		if round%2 == 1 {
			require.NotNil(t, w.lastRepair, "round %d", round)
		}
		_, err = w.Append(Record{Kind: KindMountStarted, Detail: fmt.Sprint("round ", round)})
		require.NoError(t, err)
		require.NoError(t, w.Close())
		rep, err := Verify(path)
		require.NoError(t, err)
		require.True(t, rep.OK(), "round %d: %v", round, rep.Problem)
	}
	rep, err := Verify(path)
	require.NoError(t, err)
	assert.Len(t, rep.Repairs, 2)
}

func TestOpenRefusesGarbageTail(t *testing.T) {
	path := writeLedger(t, 3)
	appendRaw(t, path, "not json at all\n")
	_, err := Open(path, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "acpfs ledger verify")
	assert.Contains(t, err.Error(), "unreadable")

	// A torn line after a garbage line is not cut: the writer could not
	// chain the repair record anyway.
	appendRaw(t, path, `{"seq":`)
	before := fileBytes(t, path)
	_, err = Repair(path)
	require.Error(t, err)
	assert.Equal(t, before, fileBytes(t, path))
}

// The tail is read from the end: reopening a large ledger reads about one
// window, not the file.
func TestReadTailCostIndependentOfLength(t *testing.T) {
	path := writeLedger(t, 20000)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(4*tailWindow))
	cr := &countingReaderAt{r: f}
	ti, err := readTail(cr, st.Size())
	require.NoError(t, err)
	assert.Equal(t, int64(20000+20000/defaultSignEvery+1), ti.seq, "records and checkpoints")
	// The window, and the first line for the file's version.
	assert.LessOrEqual(t, cr.n, int64(tailWindow+4096))

	// In version 3 the records after the last signature are read too, to
	// link them: at most what a writer writes between two checkpoints.
	w, err := Open(path, Options{Sync: SyncOff, Key: testKey(t, 7), SignEvery: 1 << 20})
	require.NoError(t, err)
	for i := range defaultSignEvery {
		_, err := w.Append(Record{Kind: KindRead, Agent: "a", Grant: "G-a", Path: fmt.Sprintf("docs/%d.md", i), PID: 42})
		require.NoError(t, err)
	}
	signedEnd := st.Size()
	st, err = f.Stat()
	require.NoError(t, err)
	cr = &countingReaderAt{r: f}
	ti, err = readTail(cr, st.Size())
	require.NoError(t, err)
	assert.Equal(t, w.seq, ti.seq)
	assert.Equal(t, w.hash, ti.hash)
	assert.Empty(t, ti.last.Sig)
	// Back to the checkpoint and forward again, the last window, the
	// first line.
	unsigned := st.Size() - signedEnd
	assert.LessOrEqual(t, cr.n, 2*unsigned+2*tailWindow+4096)
	w.mu.Lock()
	w.closed = true // leave the tail unsigned
	w.mu.Unlock()
	require.NoError(t, w.f.Close())
}

func TestReadTailLongLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	w, err := Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		// Lines longer than the first tail window (Detail is capped at
		// 16 KiB, Path is not).
		_, err := w.Append(Record{Kind: KindRead, Path: strings.Repeat("p", 3*tailWindow)})
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	appendRaw(t, path, strings.Repeat("x", 2*tailWindow)) // a long torn line too
	w, err = Open(path, Options{Sync: SyncOff})
	require.NoError(t, err)
	require.NotNil(t, w.lastRepair)
	assert.Equal(t, int64(2*tailWindow), w.lastRepair.Bytes)
	r, err := w.Append(Record{Kind: KindList})
	require.NoError(t, err)
	assert.Equal(t, int64(6), r.Seq, "3 records, a checkpoint, the repair")
	require.NoError(t, w.Close())
	assertValid(t, path, 5)
}

type countingReaderAt struct {
	r io.ReaderAt
	n int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

func appendRaw(t testing.TB, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func fileBytes(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// assertValid checks the chain and that it holds records records besides
// the writers' own checkpoints.
func assertValid(t testing.TB, path string, records int64) {
	t.Helper()
	rep, err := Verify(path)
	require.NoError(t, err)
	require.Nil(t, rep.Problem)
	assert.Equal(t, records, activity(t, path))
	assert.Equal(t, rep.Records, rep.LastSeq)
}

// activity counts the records that are not checkpoints.
func activity(t testing.TB, path string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, Scan(path, Filter{}, func(r Record) error {
		if r.Kind != KindSignedCheckpoint {
			n++
		}
		return nil
	}))
	return n
}

// assertEachOnce checks that writer "<prefix>k" wrote details 0..each-1
// exactly once, in order.
func assertEachOnce(t testing.TB, path string, writers, each int, prefix string) {
	t.Helper()
	next := map[string]int{}
	require.NoError(t, Scan(path, Filter{}, func(r Record) error {
		if r.Agent == "" {
			return nil // the writers' own records
		}
		want := next[r.Agent]
		if r.Detail != fmt.Sprint(want) {
			return fmt.Errorf("writer %s: record %s after %d", r.Agent, r.Detail, want-1)
		}
		next[r.Agent]++
		return nil
	}))
	require.Len(t, next, writers)
	for k := 0; k < writers; k++ {
		assert.Equal(t, each, next[fmt.Sprint(prefix, k)])
	}
}
