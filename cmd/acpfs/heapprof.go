package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// heapProfileEnv names a file that SIGUSR2 makes a serving daemon (acpfs
// up or mount) write a heap profile to. Hidden and off by default: it is
// for finding what a daemon keeps under load (see CONTRIBUTING.md), and
// without it the daemon installs no handler for SIGUSR2.
const heapProfileEnv = "ACPFS_HEAP_PROFILE"

// startHeapProfiler installs the SIGUSR2 handler when heapProfileEnv is
// set and returns the function that removes it.
func startHeapProfiler() func() {
	path := os.Getenv(heapProfileEnv)
	if path == "" {
		return func() {}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sig:
				if err := writeHeapProfile(path); err != nil {
					slog.Warn("heap profile", "err", err)
				}
			}
		}
	}()
	return func() { signal.Stop(sig); close(done) }
}

// writeHeapProfile writes the goroutines (to path.goroutines, as text,
// each with its creator) and then the heap as of a fresh collection,
// each through a temporary file so that a reader never sees half a
// profile.
func writeHeapProfile(path string) error {
	if err := writeProfile(path+".goroutines", func(w io.Writer) error { return pprof.Lookup("goroutine").WriteTo(w, 2) }); err != nil {
		return err
	}
	runtime.GC()
	return writeProfile(path, pprof.WriteHeapProfile)
}

func writeProfile(path string, write func(io.Writer) error) error {
	// The one rule of internal/atomicfile: a reader never sees half a
	// profile, and a symlink planted at the name is replaced, never
	// followed.
	if err := atomicfile.Write(path, 0o600, write); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	return nil
}
