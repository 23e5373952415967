package protocol

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// Reconcile repairs what a crash between the two writes of an append
// leaves behind: an event line whose protocol.json rewrite never
// happened, and the temporary files of interrupted rewrites. It runs
// under the events lock, where no writer can be midway through a
// rewrite; a deferred writer that is still writing its temporary file
// (see deferred.go) finds it gone and writes it again. It changes nothing
// when the history itself is invalid (that needs a person) or when
// protocol.json already states the derived phase, owner and waiting list.
// It reports whether protocol.json was rewritten.
func (l *Log) Reconcile() (bool, error) {
	if err := l.flushProtocol(); err != nil {
		return false, err
	}
	lk, err := l.lock(context.Background())
	if err != nil {
		return false, err
	}
	defer l.unlock(lk)
	// Judge the file itself, not content rendered in memory for views.
	l.protoID = fileID{}
	if err := l.refreshLocked(); err != nil {
		return false, err
	}
	removeStaleTemps(l.folder)
	if l.historyBad != nil || l.state.Phase == "" || l.derivedMatchesLocked() {
		return false, nil
	}
	if err := l.writeProtocolLocked(&l.state); err != nil {
		return false, &Error{Kind: Unavailable, Rule: "io", Msg: "write " + ProtocolFile + ": " + err.Error()}
	}
	return true, nil
}

// derivedMatchesLocked reports whether protocol.json states the derived
// fields.
func (l *Log) derivedMatchesLocked() bool {
	raw := l.proto.Raw
	if raw["currentPhase"] != l.state.Phase {
		return false
	}
	var owner any
	if l.state.OwnerSet {
		owner = l.state.Owner
	}
	if raw["proposalOwner"] != owner {
		return false
	}
	got, err1 := json.Marshal(raw["waitingFor"])
	want, err2 := json.Marshal(l.state.Waiting)
	if l.state.Waiting == nil {
		want = []byte("[]")
	}
	return err1 == nil && err2 == nil && string(got) == string(want)
}

// removeStaleTemps deletes leftovers of interrupted protocol.json
// rewrites (see internal/atomicfile).
func removeStaleTemps(folder string) {
	entries, err := os.ReadDir(folder)
	if err != nil {
		return
	}
	prefix := ProtocolTempPrefix
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			os.Remove(filepath.Join(folder, e.Name()))
		}
	}
}
