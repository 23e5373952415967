//go:build linux && !amd64 && !arm64

package sandbox

import "errors"

// installSeccomp has no filter to install on this architecture: the
// sandbox refuses to start rather than run without one.
func installSeccomp(netHost bool) error {
	return errors.New("acpfs run has no seccomp filter for this architecture (amd64 and arm64 only)")
}
