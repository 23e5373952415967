package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// readRecords decodes every record of a ledger file.
func readRecords(t *testing.T, path string) []ledger.Record {
	t.Helper()
	var out []ledger.Record
	require.NoError(t, ledger.Scan(path, ledger.Filter{}, func(r ledger.Record) error {
		out = append(out, r)
		return nil
	}))
	return out
}

// rechain writes recs to path renumbered and relinked from seq 1 in the
// file's format (its first record's version), every hash recomputed, as
// someone without the key can; strip drops the signatures and batch
// seals too. A seal kept on a record whose chain changed no longer
// matches, as an attacker's would not.
func rechain(t *testing.T, path string, recs []ledger.Record, strip bool) {
	t.Helper()
	var buf bytes.Buffer
	le := ledger.NewLineEncoder(max(recs[0].Version, ledger.Version1))
	for i := range recs {
		r := recs[i]
		if strip {
			r.Sig, r.Key, r.MAC = "", "", ""
		}
		r.Seq = int64(i + 1)
		line, err := le.Encode(&r)
		require.NoError(t, err)
		buf.Write(line)
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
}

// TestAuditVouchesOnlyForSignatures: the audit judges what the chain
// check's signatures cover, exactly as ledger verify checks them; a
// ledger it could not check leaves every agent unverified, never
// isolated.
func TestAuditVouchesOnlyForSignatures(t *testing.T) {
	bobCheats := ledger.Record{At: "2026-03-01T12:00:01.000000000Z", Kind: ledger.KindRead, Agent: "bob", Grant: "G-bob", Path: "oracle/answers.md"}
	tests := []struct {
		name    string
		tamper  func(t *testing.T, l string) // the clean run's ledger
		live    bool
		verdict string
		status  string
		covered bool // the signatures cover every record
		detail  string
	}{
		{name: "good ledger", tamper: func(*testing.T, string) {}, verdict: VerdictIsolated, status: SigVerified, covered: true, detail: "every record is covered by a valid signature"},
		{name: "keyless rebuilt ledger", tamper: func(t *testing.T, l string) {
			// Rebuilt from scratch without the key, the reader's copy of
			// the public key and the head removed with it: a sound chain.
			recs := append(readRecords(t, l), bobCheats)
			rechain(t, l, recs, true)
			require.NoError(t, os.Remove(filepath.Join(filepath.Dir(l), ledger.PublicKeyFile)))
			require.NoError(t, os.Remove(ledger.HeadPath(l)))
		}, verdict: VerdictUnverified, status: SigNoKey, detail: "--pubkey"},
		{name: "deleted ledger.pub", tamper: func(t *testing.T, l string) {
			require.NoError(t, os.Remove(filepath.Join(filepath.Dir(l), ledger.PublicKeyFile)))
		}, verdict: VerdictUnverified, status: SigNoKey, detail: "--pubkey"},
		{name: "keyless rebuilt ledger, ledger.pub kept", tamper: func(t *testing.T, l string) {
			rechain(t, l, append(readRecords(t, l), bobCheats), true)
			require.NoError(t, os.Remove(ledger.HeadPath(l)))
		}, verdict: VerdictUnverified, status: SigForged, detail: "must be signed"},
		{name: "forged record", tamper: func(t *testing.T, l string) {
			recs := readRecords(t, l)
			for i := range recs {
				if recs[i].Path == "deliverables/design-spec.md" && recs[i].Kind == ledger.KindRead {
					recs[i].Path = "oracle/answers.md" // would convict bob, if judged
				}
			}
			rechain(t, l, recs, false)
			require.NoError(t, os.Remove(ledger.HeadPath(l)))
		}, verdict: VerdictUnverified, status: SigForged, detail: "the signature does not match"},
		{name: "unsigned tail", tamper: func(t *testing.T, l string) {
			rechain(t, l, append(readRecords(t, l), bobCheats), false)
		}, verdict: VerdictUnverified, status: SigUnsignedTail, detail: "carry no signature"},
		{name: "unsigned tail, live", tamper: func(t *testing.T, l string) {
			// As ledger verify --live: a running writer's last records are
			// judged, so the read the tail holds convicts.
			rechain(t, l, append(readRecords(t, l), bobCheats), false)
		}, live: true, verdict: VerdictViolated, status: SigLiveTail, detail: "judged because of --live"},
	}
	gs, err := LoadGrants(filepath.Join("..", "testdata", "audit", "run", "context_grants"))
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := filepath.Join(t.TempDir(), "communication_ledger.jsonl")
			writeRunLedger(t, l, false)
			pub, err := ledger.LoadPublicKey(filepath.Join(filepath.Dir(l), ledger.PublicKeyFile))
			require.NoError(t, err)
			tt.tamper(t, l)

			chain, err := ledger.VerifyWith(l, ledger.VerifyOptions{AllowUnsignedTail: tt.live})
			require.NoError(t, err)
			a := New(gs, Options{Ledger: l, Chain: chain, Live: tt.live})
			require.NoError(t, a.AddFile(l))
			rep, err := a.Report()
			require.NoError(t, err)

			assert.Equal(t, tt.verdict, rep.Verdict)
			require.Len(t, rep.Agents, 2)
			for _, ag := range rep.Agents {
				if tt.verdict == VerdictViolated && ag.Agent == "bob" {
					assert.Equal(t, VerdictViolated, ag.Verdict, ag.Reason)
					continue
				}
				want := tt.verdict
				if want == VerdictViolated {
					want = VerdictIsolated
				}
				assert.Equal(t, want, ag.Verdict, "%s: %s", ag.Agent, ag.Reason)
				if want == VerdictUnverified {
					assert.Empty(t, ag.Violations, "%s is not convicted by a record no signature covers", ag.Agent)
				}
			}
			sg := rep.Signatures
			assert.Equal(t, tt.status, sg.Status)
			assert.Contains(t, sg.Detail, tt.detail)
			assert.Equal(t, rep.Records, sg.Total)
			if tt.covered {
				assert.Equal(t, sg.Total, sg.Covered)
			} else {
				assert.Less(t, sg.Covered, sg.Total)
			}
			if tt.status == SigNoKey {
				assert.Empty(t, sg.Keys)
				assert.Zero(t, sg.Covered)
				assert.Equal(t, rep.Records, rep.Untrusted, "nothing is judged without a key")
				assert.Contains(t, rep.Agents[0].Reason, "--pubkey")
				assert.Contains(t, rep.ChainSummary(), "signatures NOT checked")
			} else {
				assert.Equal(t, []string{pub.ID()}, sg.Keys)
			}

			// Both reports say so at their top.
			var md, html bytes.Buffer
			require.NoError(t, rep.Render(&md, "md"))
			require.NoError(t, rep.Render(&html, "html"))
			head := md.String()[:strings.Index(md.String(), "## Summary")]
			assert.Contains(t, head, "- Signatures: **"+tt.status+"**")
			assert.Contains(t, head, "- Key: "+sg.KeyList())
			assert.Contains(t, head, "records covered by signed checkpoints")
			hhead := html.String()[:strings.Index(html.String(), "<h2>Summary")]
			assert.Contains(t, hhead, "<strong>"+tt.status+"</strong>")
			assert.Contains(t, hhead, "<dt>Key</dt><dd><code>"+sg.KeyList()+"</code>")
			assert.Contains(t, hhead, "records covered by signed checkpoints")
		})
	}
}

// Each read's content hash is in the per-agent read tables.
func TestAuditReportsShowContentHashes(t *testing.T) {
	l := filepath.Join(t.TempDir(), "communication_ledger.jsonl")
	writeRunLedger(t, l, false)
	gs, err := LoadGrants(filepath.Join("..", "testdata", "audit", "run", "context_grants"))
	require.NoError(t, err)
	rep, err := auditFile(l, gs, Options{})
	require.NoError(t, err)
	require.Equal(t, VerdictIsolated, rep.Verdict)
	hash := strings.Repeat("a", 64)
	var md, html bytes.Buffer
	require.NoError(t, rep.Render(&md, "md"))
	require.NoError(t, rep.Render(&html, "html"))
	assert.Contains(t, md.String(), "| Path | Count | First seq | Grant | Allowed | Rule | SHA-256 |")
	assert.Regexp(t, `\| docs/brief\.md \| 1 \| \d+ \| G-alice \| yes \| [^|]* \| `+hash+` \|`, md.String())
	assert.Contains(t, md.String(), "| none recorded |", "bob's read was recorded without a hash")
	assert.Contains(t, html.String(), "<th>SHA-256</th>")
	assert.Contains(t, html.String(), `<td class="mono">`+hash+`</td>`)
}
