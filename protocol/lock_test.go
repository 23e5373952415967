package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func shortLockTimeout(t *testing.T) {
	old := lockTimeout
	lockTimeout = 200 * time.Millisecond
	t.Cleanup(func() { lockTimeout = old })
}

func holdFlock(t *testing.T, path string, how int) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	require.NoError(t, unix.Flock(fd, how|unix.LOCK_NB))
}

func blocked(k *kit) (Event, error) {
	return k.log.Append(EventSpec{Participant: k.owner(), Event: EvBlocked, Summary: "s", ReplyTo: intp(1)})
}

// TestLockIsPrivate: the appenders' lock is a 0600 file of its own, so a
// flock someone else holds on events.jsonl (which every uid may read)
// stalls nothing.
func TestLockIsPrivate(t *testing.T) {
	shortLockTimeout(t)
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	holdFlock(t, filepath.Join(k.dir, EventsFile), unix.LOCK_EX)

	_, err := blocked(k)
	require.NoError(t, err, "an outsider's flock on events.jsonl must not hold the appenders")
	require.NoError(t, k.log.Refresh())

	fi, err := os.Lstat(filepath.Join(k.dir, LockFile))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// TestLockHeldTooLong: a holder of the real lock that keeps it makes an
// append fail, after lockTimeout, with RuleLockBusy; nothing is written.
func TestLockHeldTooLong(t *testing.T) {
	shortLockTimeout(t)
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	_, err := blocked(k) // creates the lock file
	require.NoError(t, err)
	before, _ := k.files()

	holdFlock(t, filepath.Join(k.dir, LockFile), unix.LOCK_EX)
	_, err = blocked(k)
	require.Error(t, err)
	assert.Equal(t, Unavailable, KindOf(err))
	assert.Equal(t, RuleLockBusy, RuleOf(err))
	assert.Contains(t, err.Error(), "has held the folder's lock "+LockFile)
	after, _ := k.files()
	assert.Equal(t, before, after, "a refused append changes nothing")

	// A shared holder (a validator) does not stop it forever either, and
	// a reader waits for a writer no longer than an appender does.
	rel, err := sharedLock(k.dir)
	assert.ErrorIs(t, err, ErrLockBusy)
	assert.Nil(t, rel)
}

// TestLockFileRefused: a lock file someone else could open is not used.
func TestLockFileRefused(t *testing.T) {
	shortLockTimeout(t)
	cases := []struct {
		name  string
		plant func(t *testing.T, dir, path string)
		want  string
	}{
		{"symlink", func(t *testing.T, dir, path string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "target"), nil, 0o600))
			require.NoError(t, os.Symlink("target", path))
		}, "open " + LockFile},
		{"hard link", func(t *testing.T, dir, path string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "other"), nil, 0o600))
			require.NoError(t, os.Link(filepath.Join(dir, "other"), path))
		}, "has 2 names"},
		{"another uid's", func(t *testing.T, dir, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o600))
			if err := os.Chown(path, 65533, 65533); err != nil {
				t.Skipf("chown: %v", err)
			}
		}, "owned by uid 65533"},
		{"directory", func(t *testing.T, dir, path string) {
			require.NoError(t, os.Mkdir(path, 0o700))
		}, "open " + LockFile},
		{"fifo", func(t *testing.T, dir, path string) {
			require.NoError(t, unix.Mkfifo(path, 0o600))
		}, "not a regular file"},
	}
	for _, tc := range cases {
		// Planted before the log's first append, or after one, while the
		// log keeps the lock file it used open.
		for _, warm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/after an append %v", tc.name, warm), func(t *testing.T) {
				k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
				if warm {
					k.must(ev{from: "server", event: EvDeliverableDrafted})
				}
				path := filepath.Join(k.dir, LockFile)
				require.NoError(t, os.RemoveAll(path))
				tc.plant(t, k.dir, path)
				before, _ := k.files()
				_, err := blocked(k)
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
				assert.NotEqual(t, RuleLockBusy, RuleOf(err))
				after, _ := k.files()
				assert.Equal(t, before, after)
			})
		}
	}
}

// TestHeldFilesFollowTheNames: a log keeps the lock file and
// events.jsonl open between appends, and still appends to whatever
// events.jsonl names now and locks whatever lock file is there now.
func TestHeldFilesFollowTheNames(t *testing.T) {
	shortLockTimeout(t)
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	k.must(ev{from: "server", event: EvDeliverableDrafted})

	// events.jsonl replaced by a copy: the next line goes to the copy.
	events := filepath.Join(k.dir, EventsFile)
	old, err := os.Open(events)
	require.NoError(t, err)
	defer old.Close()
	content, _ := k.files()
	require.NoError(t, os.WriteFile(events+".new", []byte(content), 0o644))
	require.NoError(t, os.Rename(events+".new", events))
	k.must(ev{from: "server", event: EvProposalSubmitted})
	now, _ := k.files()
	assert.Greater(t, len(now), len(content), "the line went to the file the name leads to")
	fi, err := old.Stat()
	require.NoError(t, err)
	assert.Equal(t, int64(len(content)), fi.Size(), "the replaced file is left alone")

	// The lock file replaced: an outsider's flock on the new one holds
	// the next append.
	lock := filepath.Join(k.dir, LockFile)
	require.NoError(t, os.Remove(lock))
	require.NoError(t, os.WriteFile(lock, nil, 0o600))
	holdFlock(t, lock, unix.LOCK_EX)
	_, err = blocked(k)
	require.Error(t, err)
	assert.Equal(t, RuleLockBusy, RuleOf(err))
}

// TestLockFileModeRepaired: our own lock file left readable by others
// (an older acpfs, a umask) is made 0600 before it is used.
func TestLockFileModeRepaired(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	path := filepath.Join(k.dir, LockFile)
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	require.NoError(t, os.Chmod(path, 0o644))
	_, err := blocked(k)
	require.NoError(t, err)
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestWaitFlockTimesOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	holdFlock(t, path, unix.LOCK_EX)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	err = waitFlock(context.Background(), fd, unix.LOCK_SH, 50*time.Millisecond)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrLockBusy), "%v", err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = waitFlock(ctx, fd, unix.LOCK_SH, time.Hour)
	assert.ErrorIs(t, err, ErrLockInterrupted)
}

// TestLockWaitInterrupted: an append whose context ends while it waits
// for the lock gives up at once with RuleInterrupted.
func TestLockWaitInterrupted(t *testing.T) {
	old := lockTimeout
	lockTimeout = time.Hour // only the context can end the wait
	t.Cleanup(func() { lockTimeout = old })
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	_, err := blocked(k)
	require.NoError(t, err)
	holdFlock(t, filepath.Join(k.dir, LockFile), unix.LOCK_EX)
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	line := encodeLine(Event{Seq: 3, From: k.owner(), Event: EvBlocked, At: eventTime(k.tick(), kitEpoch, true), Summary: "s", ReplyTo: intp(1)})
	_, err = k.log.AppendLineRecordedContext(ctx, line, k.owner(), nil)
	require.Error(t, err)
	assert.Equal(t, RuleInterrupted, RuleOf(err))
}

// TestReaderUnderMutexDoesNotWaitForOwnWriter: a writer of this process
// takes the exclusive lock before the log's mutex; a reader that holds
// the mutex and wants the shared lock meanwhile does not wait for that
// writer (which waits for the mutex) until LockTimeout, but reads.
func TestReaderUnderMutexDoesNotWaitForOwnWriter(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	_, err := blocked(k) // creates the lock file
	require.NoError(t, err)
	l := k.log
	l.mu.Lock()
	done := make(chan error, 1)
	go func() {
		lk, err := l.lock(context.Background())
		if err == nil {
			l.unlock(lk)
		}
		done <- err
	}()
	release, err := l.sharedLockLocked()
	require.NoError(t, err, "the reader gave up on its own process's writer")
	if release != nil {
		release()
	}
	l.mu.Unlock()
	require.NoError(t, <-done)
}

// TestRefreshWithoutTheLock: a log that found the files unchanged answers
// Refresh and FrozenNow without its lock, and still follows every change
// another writer makes, and a close.
func TestRefreshWithoutTheLock(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
	other, err := OpenLog(k.dir)
	require.NoError(t, err)
	defer other.Close()
	for _, step := range k.happySteps() {
		step() // through k.log
		require.NoError(t, other.Refresh())
		assert.Equal(t, k.log.Snapshot(), other.Snapshot())
		frozen, err := other.FrozenNow()
		require.NoError(t, err)
		assert.Equal(t, other.Snapshot().Frozen, frozen)
		require.NotNil(t, other.current(), "caught up and published")
	}
	assert.NotEmpty(t, other.Snapshot().Frozen, "the happy path freezes the primary deliverable")

	// protocol.json rewritten with another declaration: replayed.
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(k.read(ProtocolFile)), &m))
	m["objective"] = "Another objective"
	b, err := json.Marshal(m)
	require.NoError(t, err)
	k.write(ProtocolFile, string(b))
	assert.Nil(t, other.current(), "protocol.json changed")
	require.NoError(t, other.Refresh())
	assert.Equal(t, PhaseCompleted, other.Snapshot().Phase)

	require.NoError(t, other.Close())
	assert.Error(t, other.Refresh(), "a closed log")
	_, err = other.FrozenNow()
	assert.Error(t, err)
}
