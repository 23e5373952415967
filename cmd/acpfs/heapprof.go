package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
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

// writeHeapProfile writes the heap as of a fresh collection, through a
// temporary file so that a reader never sees half a profile.
func writeHeapProfile(path string) error {
	runtime.GC()
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("heap profile %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
