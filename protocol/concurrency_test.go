package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary doubles as an appender process: with
// ACPFS_PROTOCOL_APPENDER=<folder>:<name>:<count> it appends count
// blocked events through its own Log and exits.
func TestMain(m *testing.M) {
	if spec := os.Getenv("ACPFS_PROTOCOL_APPENDER"); spec != "" {
		os.Exit(appenderMain(spec))
	}
	code := m.Run()
	if fuzzTemplate != "" {
		os.RemoveAll(filepath.Dir(fuzzTemplate))
	}
	os.Exit(code)
}

func appenderMain(spec string) int {
	parts := strings.Split(spec, ":")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad appender spec", spec)
		return 2
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		return 2
	}
	if err := appendBlocked(parts[0], parts[1], n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// appendBlocked appends n blocked events from "server" whose summaries
// are "<name>-<i>". Every other one goes through AppendLine with a guessed
// seq and retries when another writer won the race, so that refused
// lines under contention are exercised too.
func appendBlocked(folder, name string, n int) error {
	l, err := OpenLog(folder)
	if err != nil {
		return err
	}
	defer l.Close()
	return appendBlockedTo(l, name, n)
}

// appendBlockedTo is appendBlocked through the log l, which other
// goroutines may share (as the views of one daemon share theirs).
func appendBlockedTo(l *Log, name string, n int) error {
	for i := 0; i < n; i++ {
		summary := fmt.Sprintf("%s-%d", name, i)
		if i%2 == 0 {
			if _, err := l.Append(EventSpec{Participant: "server", Event: EvBlocked, Summary: summary, ReplyTo: intp(1)}); err != nil {
				return fmt.Errorf("append %s: %w", summary, err)
			}
			continue
		}
		for attempt := 0; ; attempt++ {
			if err := l.Refresh(); err != nil {
				return err
			}
			s := l.Snapshot()
			line := encodeLine(Event{Seq: s.LastSeq + 1, From: "server", Event: EvBlocked, At: eventTime(l.now(), kitEpoch, true), Summary: summary, ReplyTo: intp(1)})
			_, err := l.AppendLine(line, "server")
			if err == nil {
				break
			}
			var pe *Error
			if !asError(err, &pe) || pe.Rule != "seq-continuous" && pe.Rule != "at-order" || attempt > 10000 {
				return fmt.Errorf("append line %s: %w", summary, err)
			}
		}
	}
	return nil
}

func asError(err error, target **Error) bool {
	pe, ok := err.(*Error)
	if ok {
		*target = pe
	}
	return ok
}

func TestConcurrentAppenders(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "a log each"
		if shared {
			name = "one log shared by the goroutines"
		}
		t.Run(name, func(t *testing.T) { testConcurrentAppenders(t, shared) })
	}
}

// testConcurrentAppenders races goroutines of this process, each with a
// log of its own or all through one (the lock and events files it keeps
// open must still exclude the other processes), against processes.
func testConcurrentAppenders(t *testing.T, shared bool) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	const goroutines, procs, each = 4, 3, 25

	var one *Log
	if shared {
		var err error
		one, err = OpenLog(k.dir)
		require.NoError(t, err)
		defer one.Close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines+procs)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if shared {
				errs <- appendBlockedTo(one, fmt.Sprintf("g%d", g), each)
				return
			}
			errs <- appendBlocked(k.dir, fmt.Sprintf("g%d", g), each)
		}()
	}
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), fmt.Sprintf("ACPFS_PROTOCOL_APPENDER=%s:p%d:%d", k.dir, p, each))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				errs <- fmt.Errorf("process p%d: %v: %s", p, err, stderr.String())
				return
			}
			errs <- nil
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Every accepted event is in the file exactly once, seqs continuous.
	f, err := os.Open(filepath.Join(k.dir, EventsFile))
	require.NoError(t, err)
	defer f.Close()
	seen := map[string]int{}
	seq := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		seq++
		require.Equal(t, seq, e.Seq)
		seen[e.Summary]++
	}
	require.NoError(t, sc.Err())
	total := (goroutines + procs) * each
	assert.Equal(t, 1+total, seq)
	for name := 0; name < goroutines+procs; name++ {
		prefix := fmt.Sprintf("g%d", name)
		if name >= goroutines {
			prefix = fmt.Sprintf("p%d", name-goroutines)
		}
		for i := 0; i < each; i++ {
			assert.Equal(t, 1, seen[fmt.Sprintf("%s-%d", prefix, i)], "%s-%d", prefix, i)
		}
	}
	res := Validate(k.dir)
	assert.Empty(t, res.Errors)
	require.NoError(t, k.log.Refresh())
	assert.Equal(t, 1+total, k.log.Snapshot().LastSeq)
	assert.Equal(t, PhaseBlocked, k.log.Snapshot().Phase)
}
