package bench

import (
	"testing"
	"time"
)

// variant is one way of doing the same operation (native, loopback,
// acpfs...).
type variant struct {
	name string
	// idle, when set, is how long the variant's resource must have been
	// left alone before each timed call (the wait is not timed).
	idle time.Duration
	// resource names what idle is about (a mount shared by several
	// variants); the variant's name when empty.
	resource string
	run      func() error
}

func (v variant) key() string {
	if v.resource != "" {
		return v.resource
	}
	return v.name
}

// runner times variants in interleaved rounds. Interleaving matters on a
// shared machine: load that comes and goes hits every variant alike, so
// their ratios hold even when the absolute figures move.
type runner struct {
	vs   []variant
	last map[string]time.Time
}

func newRunner(vs ...variant) *runner {
	return &runner{vs: vs, last: make(map[string]time.Time, len(vs))}
}

// warm runs every variant once, untimed, and returns how long each took.
func (r *runner) warm(b *testing.B) map[string]time.Duration {
	b.Helper()
	out := make(map[string]time.Duration, len(r.vs))
	for _, v := range r.vs {
		start := time.Now()
		if err := v.run(); err != nil {
			b.Fatalf("%s (warm-up): %v", v.name, err)
		}
		r.last[v.key()] = time.Now()
		out[v.name] = r.last[v.key()].Sub(start)
	}
	return out
}

// rounds runs perOp×b.N rounds of every variant in turn and returns
// each variant's samples.
func (r *runner) rounds(b *testing.B, perOp int) map[string][]time.Duration {
	b.Helper()
	samples := make(map[string][]time.Duration, len(r.vs))
	b.ResetTimer()
	for i := 0; i < b.N*perOp; i++ {
		for _, v := range r.vs {
			if v.idle > 0 {
				if wait := v.idle - time.Since(r.last[v.key()]); wait > 0 {
					b.StopTimer()
					time.Sleep(wait)
					b.StartTimer()
				}
			}
			start := time.Now()
			if err := v.run(); err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			now := time.Now()
			samples[v.name] = append(samples[v.name], now.Sub(start))
			r.last[v.key()] = now
		}
	}
	b.StopTimer()
	return samples
}
