package mount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

const fusectl = "/sys/fs/fuse/connections"

// abortConnection aborts the FUSE connection serving mountpoint through
// the fusectl filesystem, mounting it for the occasion if needed.
func abortConnection(mountpoint string) error {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return err
	}
	minor, err := fuseMinor(abs)
	if err != nil {
		return err
	}
	ctl := filepath.Join(fusectl, minor, "abort")
	if _, err := os.Stat(ctl); err != nil {
		if merr := syscall.Mount("none", fusectl, "fusectl", 0, ""); merr != nil {
			return fmt.Errorf("mount fusectl: %w", merr)
		}
		defer syscall.Unmount(fusectl, 0)
	}
	return os.WriteFile(ctl, []byte("1"), 0o200)
}

// fuseMinor returns the device minor (the fusectl connection number) of
// the FUSE mount at abs.
func fuseMinor(abs string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source
		fields := strings.Fields(s.Text())
		if len(fields) < 5 || fields[4] != abs {
			continue
		}
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && strings.HasPrefix(fields[i+1], "fuse") {
				_, minor, ok := strings.Cut(fields[2], ":")
				if ok {
					return minor, nil
				}
			}
		}
	}
	return "", fmt.Errorf("%s is not a FUSE mount", abs)
}

// closeOnExecFUSE marks every open /dev/fuse descriptor of this process
// close-on-exec.
func closeOnExecFUSE() error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || target != "/dev/fuse" {
			continue
		}
		var fd int
		if _, err := fmt.Sscanf(e.Name(), "%d", &fd); err == nil {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}
