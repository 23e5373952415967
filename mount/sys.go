package mount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func runQuiet(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Doctor describes whether this machine can mount acpfs views.
type Doctor struct {
	Root        bool
	DevFUSE     error  // nil when /dev/fuse opens read-write
	Fusermount  string // path of fusermount3, if any
	Passthrough bool   // running as root, so read-only files use FUSE passthrough
}

// Check inspects the machine.
func Check() Doctor {
	d := Doctor{Root: os.Geteuid() == 0}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		d.DevFUSE = err
	} else {
		f.Close()
	}
	if p, err := exec.LookPath("fusermount3"); err == nil {
		d.Fusermount = p
	}
	d.Passthrough = d.Root
	return d
}

// Usable returns nil when views can be mounted, or the reason they cannot.
func (d Doctor) Usable() error {
	if d.DevFUSE != nil {
		return fmt.Errorf("/dev/fuse is not usable: %w (load the fuse module or give the container the device)", d.DevFUSE)
	}
	if !d.Root && d.Fusermount == "" {
		return errors.New("not root and fusermount3 is not installed (apt-get install fuse3)")
	}
	return nil
}
