package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/audit"
	"github.com/acpfs/acpfs/ledger"
)

// rebuildLedger rewrites the ledger file at path as someone without the
// key can: edit changes the records, then every seq is renumbered from 1
// and the chain relinked in the file's format (its first record's
// version); strip removes the signatures and batch seals as well.
func rebuildLedger(t *testing.T, path string, strip bool, edit func([]ledger.Record) []ledger.Record) {
	t.Helper()
	var recs []ledger.Record
	require.NoError(t, ledger.Scan(path, ledger.Filter{}, func(r ledger.Record) error {
		recs = append(recs, r)
		return nil
	}))
	le := ledger.NewLineEncoder(max(recs[0].Version, ledger.Version1))
	recs = edit(recs)
	var buf bytes.Buffer
	for i := range recs {
		r := &recs[i]
		if strip {
			r.Sig, r.Key, r.MAC = "", "", ""
		}
		r.Seq = int64(i + 1)
		line, err := le.Encode(r)
		require.NoError(t, err)
		buf.Write(line)
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
}

// TestAuditVouchesOnlyForWhatItVerified (issue 23, finding 6): a ledger
// written through a real view, then rebuilt without the key with its
// ledger.pub deleted, is a sound chain that `ledger verify` cannot vouch
// for (exit 5). The built binary's `audit` cannot either: every agent
// unverified, exit 2, in Markdown and HTML, with the signature status,
// the key id and the signed coverage at the top; never isolated.
func TestAuditVouchesOnlyForWhatItVerified(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(reviewerGrant())
	_, err := os.ReadFile(v.path("README.md"))
	require.NoError(t, err)
	// The writer signs everything it wrote when it stops.
	require.NoError(t, v.m.Stop())
	require.NoError(t, c.lw.Close())
	pub, err := ledger.LoadPublicKey(filepath.Join(c.runs, ledger.PublicKeyFile))
	require.NoError(t, err)
	readme := fileSHA(t, filepath.Join(c.folder, "README.md"))

	stripReviewerRead := func(rs []ledger.Record) []ledger.Record {
		for i := range rs {
			if rs[i].Agent == reviewer && rs[i].Path == "README.md" {
				rs[i].Path = "oracle/answer.md" // would convict the reviewer, if judged
			}
		}
		return rs
	}
	tests := []struct {
		name    string
		tamper  func(t *testing.T, runs string) []string // returns extra audit arguments
		verify  int                                      // ledger verify's exit status
		code    int                                      // audit's
		verdict string
		status  string
	}{
		{"as written", func(*testing.T, string) []string { return nil }, 0, 0, audit.VerdictIsolated, audit.SigVerified},
		{"ledger.pub deleted", func(t *testing.T, runs string) []string {
			require.NoError(t, os.Remove(filepath.Join(runs, ledger.PublicKeyFile)))
			return nil
		}, 5, 2, audit.VerdictUnverified, audit.SigNoKey},
		{"rebuilt without the key, ledger.pub deleted", func(t *testing.T, runs string) []string {
			l := filepath.Join(runs, "communication_ledger.jsonl")
			rebuildLedger(t, l, true, func(rs []ledger.Record) []ledger.Record { return rs })
			for _, name := range []string{ledger.PublicKeyFile, ledger.KeyFile, filepath.Base(ledger.HeadPath(l))} {
				require.NoError(t, os.Remove(filepath.Join(runs, name)))
			}
			return nil
		}, 5, 2, audit.VerdictUnverified, audit.SigNoKey},
		{"rebuilt without the key, checked with the reviewer's copy of the key", func(t *testing.T, runs string) []string {
			kept := filepath.Join(t.TempDir(), "reviewer.pub")
			require.NoError(t, os.Rename(filepath.Join(runs, ledger.PublicKeyFile), kept))
			l := filepath.Join(runs, "communication_ledger.jsonl")
			rebuildLedger(t, l, true, stripReviewerRead)
			require.NoError(t, os.Remove(ledger.HeadPath(l)))
			return []string{"--pubkey", kept}
		}, 2, 2, audit.VerdictUnverified, audit.SigForged},
		{"a record forged, signatures kept", func(t *testing.T, runs string) []string {
			l := filepath.Join(runs, "communication_ledger.jsonl")
			rebuildLedger(t, l, false, stripReviewerRead)
			require.NoError(t, os.Remove(ledger.HeadPath(l)))
			return nil
		}, 2, 2, audit.VerdictUnverified, audit.SigForged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := filepath.Join(newDir(t, "runs"), "agent_runs")
			require.NoError(t, os.CopyFS(runs, os.DirFS(c.runs)))
			extra := tt.tamper(t, runs)
			l := filepath.Join(runs, "communication_ledger.jsonl")

			verifyArgs := []string{"ledger", "verify", "--ledger", l}
			for i := 0; i+1 < len(extra); i += 2 {
				if extra[i] == "--pubkey" {
					verifyArgs = append(verifyArgs, extra[i], extra[i+1])
				}
			}
			out, stderr, code := acpfs(t, verifyArgs...)
			require.Equal(t, tt.verify, code, "ledger verify: %s%s", out, stderr)

			args := append([]string{"audit", "--runs", runs}, extra...)
			out, stderr, code = acpfs(t, append(args, "--format", "json")...)
			require.Equal(t, tt.code, code, "%s%s", out, stderr)
			var rep audit.Report
			require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
			assert.Equal(t, tt.verdict, rep.Verdict)
			assert.Equal(t, tt.status, rep.Signatures.Status, rep.Signatures.Detail)
			require.NotEmpty(t, rep.Agents)
			for _, ag := range rep.Agents {
				assert.Equal(t, tt.verdict, ag.Verdict, "%s: %s", ag.Agent, ag.Reason)
				assert.Empty(t, ag.Violations, ag.Agent)
			}
			if tt.code != 0 {
				assert.Contains(t, stderr, "audit unverified: signatures: "+tt.status)
			}
			if tt.status == audit.SigNoKey {
				assert.Contains(t, stderr, "--pubkey FILE")
				assert.Zero(t, rep.Signatures.Covered)
			}

			for _, format := range []string{"md", "html"} {
				report := filepath.Join(t.TempDir(), "audit."+format)
				out, stderr, code := acpfs(t, append(args, "--format", format, "--out", report)...)
				require.Equal(t, tt.code, code, "%s%s", out, stderr)
				page := readFile(t, report)
				top := page[:strings.Index(page, "Summary")]
				assert.Contains(t, top, tt.status, format)
				assert.Contains(t, top, "records covered by signed checkpoints", format)
				assert.Contains(t, page, tt.verdict, format)
				if tt.verdict != audit.VerdictIsolated {
					assert.NotContains(t, page, "**isolated**", format)
					assert.NotContains(t, page, "badge v-isolated", format)
				}
				switch {
				case tt.status == audit.SigNoKey:
					assert.NotContains(t, top, pub.ID(), "%s: no key was checked", format)
				default:
					assert.Contains(t, top, pub.ID(), format)
				}
				if tt.verdict == audit.VerdictIsolated {
					assert.Contains(t, page, readme, "%s: the read's content hash", format)
				}
			}
		})
	}
}
