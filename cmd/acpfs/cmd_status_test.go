package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/acpfs/acpfs/mount"
)

// TestDeadCoordinatorError: what `acpfs status` tells to run depends on
// what became of the views: a hung one needs `acpfs umount --force`
// (`acpfs up` alone would not clear it), a dead one only `acpfs up`.
func TestDeadCoordinatorError(t *testing.T) {
	dead := mount.CoordinatorStatus{PID: -1, State: mount.StateDead, StateDetail: "pid 123 is not running"}
	for _, tc := range []struct {
		name    string
		st      mount.CoordinatorStatus
		health  []mount.ViewHealth
		want    []string
		notWant string
	}{
		{"running", mount.CoordinatorStatus{State: mount.StateRunning}, nil, nil, ""},
		{"hung and dead views", dead, []mount.ViewHealth{{Mountpoint: "/mnt/a", State: mount.ViewHung}, {Mountpoint: "/mnt/b", State: mount.ViewDead}},
			[]string{"1 view(s) hang", "acpfs umount --force` on /mnt/a", "then `acpfs up` again"}, "it clears them"},
		{"dead views", dead, []mount.ViewHealth{{Mountpoint: "/mnt/a", State: mount.ViewDead}, {Mountpoint: "/mnt/b", State: mount.ViewUnmounted}},
			[]string{"pid 123 is not running", "1 view(s) are dead (ENOTCONN)", "run `acpfs up` again: it clears them"}, "umount"},
		{"nothing mounted", dead, []mount.ViewHealth{{Mountpoint: "/mnt/a", State: mount.ViewUnmounted}},
			[]string{"none of its views is mounted", "run `acpfs up` again"}, "umount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := deadCoordinatorError(tc.st, tc.health)
			if tc.want == nil {
				assert.NoError(t, err)
				return
			}
			assert.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), tc.notWant)
		})
	}
}
