package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/natsrv"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/store"
)

// restartChildEnv makes the test binary a child process of
// TestLedgerVerifyStoreAfterRestart instead of running the tests: the
// part that is killed with SIGKILL ("host" or "server").
const restartChildEnv = "ACPFS_TEST_RESTART_CHILD"

// restartChild runs the child the environment names, if any, and never
// returns then: it prints "ready" once it is there to be killed.
func restartChild() {
	var err error
	switch os.Getenv(restartChildEnv) {
	case "":
		return
	case "host":
		// Killed with records no signature covers yet, as a host killed
		// within a second of writing leaves them.
		var h *hostLife
		if h, err = startHost(os.Getenv("RESTART_URL"), os.Getenv("RESTART_RUNS"), 6); err == nil {
			err = h.unsigned(2)
		}
	case "server":
		var port int
		if port, err = strconv.Atoi(os.Getenv("RESTART_PORT")); err == nil {
			_, err = natsrv.Start(natsrv.Config{Name: "store", Dir: os.Getenv("RESTART_DIR"), Port: port})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

// hostLife is one life of a store host: its ledger writer and the
// shipper of its ledger to the store.
type hostLife struct {
	w  *ledger.Writer
	s  *store.Store
	sh *store.Shipper
}

// startHost opens the ledger in runs (recovering what a killed writer
// left), appends n records, and ships what is signed to the store at
// url.
func startHost(url, runs string, n int) (*hostLife, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(runs, "communication_ledger.jsonl")
	w, err := ledger.Open(path, ledger.Options{Sync: ledger.SyncAlways, SignEvery: 4, SignAfter: time.Hour})
	if err != nil {
		return nil, err
	}
	h := &hostLife{w: w}
	if err := h.unsigned(n); err != nil {
		return nil, err
	}
	if h.s, err = store.Open(ctx, store.Options{URL: url, Collab: "c1", Host: "ha", Retry: true}); err != nil {
		return nil, err
	}
	if h.sh, err = store.ShipLedger(context.Background(), h.s, path, filepath.Join(runs, ledger.PublicKeyFile)); err != nil {
		return nil, err
	}
	return h, h.sh.Flush(ctx)
}

// unsigned appends n records, which no signature covers until the next
// checkpoint (the writer signs every fourth, or when it closes).
func (h *hostLife) unsigned(n int) error {
	for i := 0; i < n; i++ {
		if _, err := h.w.Append(ledger.Record{Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice", Path: fmt.Sprintf("notes/%d.md", i)}); err != nil {
			return err
		}
	}
	return nil
}

// stop closes the writer (which signs what is left) and ships
// everything, waiting for a server that is coming back.
func (h *hostLife) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, h.w.Close())
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.sh.Flush(ctx)
		cancel()
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the ledger is still not shipped: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, h.sh.Stop())
	h.s.Close()
}

// startRestartChild starts the test binary as the child named, and
// returns it once it is ready.
func startRestartChild(t *testing.T, name string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), restartChildEnv+"="+name), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the %s child did not start", name)
	require.Equal(t, "ready\n", line)
	return cmd
}

func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
}

// freePort returns a TCP port of the loopback no one listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestLedgerVerifyStoreAfterRestart: `ledger verify --store` after a
// store host was killed with SIGKILL (its writer with records no
// signature covered yet, its shipper running) and started again, or
// after the store's server was killed with SIGKILL and started again
// while a host shipped, finds every host's copy valid, with the head it stands for:
// no "no head file" warning.
func TestLedgerVerifyStoreAfterRestart(t *testing.T) {
	for _, tt := range []struct {
		name   string
		killed string
	}{
		{"host killed and restarted", "host"},
		{"server killed and restarted", "server"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			runs := t.TempDir()
			port := freePort(t)
			url := fmt.Sprintf("nats://127.0.0.1:%d", port)
			serverEnv := []string{"RESTART_PORT=" + strconv.Itoa(port), "RESTART_DIR=" + t.TempDir()}
			var server *exec.Cmd
			if tt.killed == "server" {
				server = startRestartChild(t, "server", serverEnv...)
			} else {
				srv, err := natsrv.Start(natsrv.Config{Name: "store", Dir: t.TempDir(), Port: port})
				require.NoError(t, err)
				t.Cleanup(srv.Shutdown)
			}

			if tt.killed == "host" {
				kill(t, startRestartChild(t, "host", "RESTART_URL="+url, "RESTART_RUNS="+runs))
			} else {
				h, err := startHost(url, runs, 6)
				require.NoError(t, err)
				require.NoError(t, h.unsigned(2))
				kill(t, server)
				startRestartChild(t, "server", serverEnv...)
				h.stop(t)
			}
			// The host starts again.
			h, err := startHost(url, runs, 3)
			require.NoError(t, err)
			h.stop(t)

			out, code, err := ledgerRunCLI(t, "ledger", "verify", "--store", url, "--collab", "c1")
			require.NoError(t, err, out)
			assert.Equal(t, exitOK, code)
			assert.Contains(t, out, "host ha:\nledger store:c1/ha/communication_ledger.jsonl: valid chain")
			assert.NotContains(t, out, "no head file")
			assert.Contains(t, out, "the head's checkpoint at seq")
			assert.NotContains(t, strings.ToLower(out), "warning", out)
			_ = server
		})
	}
}
