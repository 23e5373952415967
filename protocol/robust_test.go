package protocol

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOddProtocolValues replaces every field of protocol.json, of its
// deliverables and of the primary deliverable by values of every JSON
// type: validation, replay and appends must answer, never panic.
func TestOddProtocolValues(t *testing.T) {
	values := []any{nil, true, 0, 2.5, "", "x", []any{}, []any{1, "a", nil}, map[string]any{}, map[string]any{"id": []any{}}}
	base := kitAt(t, "reviewing")
	var paths [][]string
	for k := range base.proto().Raw {
		paths = append(paths, []string{k})
	}
	for _, k := range []string{"mode", "dir", "primary", "supporting", "attachments", "owner"} {
		paths = append(paths, []string{"deliverables", k})
	}
	for _, k := range []string{"type", "file", "checklist"} {
		paths = append(paths, []string{"deliverables", "primary", k})
	}
	original := base.read(ProtocolFile)
	for _, p := range paths {
		for _, v := range values {
			base.write(ProtocolFile, original)
			base.editJSON(func(m map[string]any) {
				cur := m
				for _, k := range p[:len(p)-1] {
					next, ok := cur[k].(map[string]any)
					if !ok {
						return
					}
					cur = next
				}
				cur[p[len(p)-1]] = v
			})
			require.NotPanics(t, func() {
				res := Validate(base.dir)
				assert.Contains(t, []int{0, 1, 2}, res.ExitCode())
				l, err := OpenLog(base.dir)
				if err == nil {
					l.Snapshot()
					_, _ = l.Append(EventSpec{Participant: "reader", Event: EvBlocked, Summary: "x", ReplyTo: intp(1)})
					_, _ = l.Status("reader")
					_ = l.CheckProtocolWrite([]byte(original))
				}
			}, "%v = %#v", p, v)
		}
	}
}
