package protocol

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestValidateDuringAppends runs Validate again and again while another
// Log appends events that change the derived state (waitingFor) each
// time: validate must read events.jsonl and protocol.json as one
// consistent pair, and never a line still being written.
func TestValidateDuringAppends(t *testing.T) {
	// decision_proposed and question_classified alternate forever in
	// decision_review; each changes waitingFor.
	cycle := []string{EvDecisionProposed, EvQuestionClassified}
	line := func(l *Log, n int) []byte {
		s := l.Snapshot() // this goroutine is the only appender
		prev, ok := parseTime(s.LastAt)
		return encodeLine(Event{Seq: s.LastSeq + 1, From: "server", Event: cycle[n%2],
			At: eventTime(l.now(), prev, ok), Summary: fmt.Sprintf("loop %d", n), ReplyTo: intp(1)})
	}
	cases := []struct {
		name      string
		validates int
		append    func(l *Log, n int) error
	}{
		{"Append", 100, func(l *Log, n int) error {
			_, err := l.Append(EventSpec{Participant: "server", Event: cycle[n%2], Summary: fmt.Sprintf("loop %d", n), ReplyTo: intp(1)})
			return err
		}},
		{"AppendLine with CRLF and unknown fields", 100, func(l *Log, n int) error {
			b := line(l, n)
			b = append(b[:len(b)-1], `,"x-writer":"other"}`+"\r"...)
			_, err := l.AppendLine(b, "server")
			return err
		}},
		{"AppendPending", 100, func(l *Log, n int) error {
			_, err := l.AppendPending(line(l, n), "server")
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := kitAt(t, "classified")
			l, err := OpenLog(k.dir)
			require.NoError(t, err)
			defer l.Close()
			stop := make(chan struct{})
			first := make(chan struct{}) // closed after the first append
			done := make(chan error, 1)
			count := 0
			go func() {
				defer func() {
					if count == 0 {
						close(first)
					}
				}()
				for n := 0; ; n++ {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					if err := c.append(l, n); err != nil {
						done <- fmt.Errorf("append %d: %w", n, err)
						return
					}
					count++
					if count == 1 {
						close(first)
					}
				}
			}()
			<-first // validations start while appends are under way
			var bad []string
			for i := 0; i < c.validates; i++ {
				res := Validate(k.dir)
				for _, e := range res.Errors {
					bad = append(bad, fmt.Sprintf("validation %d: %s", i, e))
				}
				for _, w := range res.Warnings {
					if rulesOf([]string{w})[0] != "field-unknown" {
						bad = append(bad, fmt.Sprintf("validation %d: warning %s", i, w))
					}
				}
			}
			close(stop)
			require.NoError(t, <-done)
			t.Logf("%d validations during %d appends", c.validates, count)
			assert.Positive(t, count)
			if len(bad) > 5 {
				bad = append(bad[:5], fmt.Sprintf("... and %d more", len(bad)-5))
			}
			assert.Empty(t, bad)
			assert.Empty(t, Validate(k.dir).Errors)
		})
	}
}
