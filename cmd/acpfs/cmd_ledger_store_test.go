package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/audit"
	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/natsrv"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/store"
)

// ledgerStoreHosts starts a store and ships two hosts' run directories to
// collaboration c1: ha mounts alice's grant (G-alice) and alice keeps to
// it; hb mounts bob's (G-bob), and bob reads the oracle when cheat is
// set. The store holds each grant for its host. It returns the store's
// URL and hb's runs.
func ledgerStoreHosts(t *testing.T, cheat bool) (string, string) {
	t.Helper()
	srv, err := natsrv.Start(natsrv.Config{Name: "t", Dir: t.TempDir(), Port: -1})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	var runsB string
	for _, h := range []struct {
		host, agent string
		cheat       bool
	}{{"ha", "alice", false}, {"hb", "bob", cheat}} {
		host := h.host
		runs := ledgerTestRunOf(t, h.cheat, h.agent)
		if host == "hb" {
			runsB = runs
		}
		s, err := store.Open(context.Background(), store.Options{URL: url, Collab: "c1", Host: host})
		require.NoError(t, err)
		t.Cleanup(s.Close)
		g, err := grants.Load(filepath.Join(runs, "context_grants", "G-"+h.agent+".json"))
		require.NoError(t, err)
		require.NoError(t, s.CreateGrant(host, g))
		sh, err := store.ShipLedger(context.Background(), s, filepath.Join(runs, "communication_ledger.jsonl"), filepath.Join(runs, ledger.PublicKeyFile))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, sh.Flush(ctx))
		cancel()
		require.NoError(t, sh.Stop())
	}
	return url, runsB
}

func TestLedgerVerifyStore(t *testing.T) {
	url, runsB := ledgerStoreHosts(t, false)

	out, code, err := ledgerRunCLI(t, "ledger", "verify", "--store", url, "--collab", "c1")
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "host ha:\nledger store:c1/ha/communication_ledger.jsonl: valid chain, 5 record(s)")
	assert.Contains(t, out, "host hb:\nledger store:c1/hb/communication_ledger.jsonl: valid chain, 2 record(s)")
	assert.NotContains(t, out, os.TempDir()+"/acpfs-ledgers-", "the temporary directory is not shown")
	// The store's ledger stream is append-only: each copy carries the
	// head it stands for, and nothing warns that there is none.
	assert.NotContains(t, out, "no head file")
	assert.Contains(t, out, "the head's checkpoint at seq")

	out, code, err = ledgerRunCLI(t, "ledger", "verify", "--store", url, "--collab", "c1", "--host", "hb", "--json")
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	var reps []struct {
		Host   string              `json:"host"`
		Report ledger.VerifyReport `json:"report"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &reps))
	require.Len(t, reps, 1)
	assert.Equal(t, "hb", reps[0].Host)
	assert.True(t, reps[0].Report.SignaturesChecked)

	// Pinned to hb's key, ha's chain is signed by an unknown key.
	_, code, err = ledgerRunCLI(t, "ledger", "verify", "--store", url, "--collab", "c1", "--pubkey", filepath.Join(runsB, ledger.PublicKeyFile))
	assert.Equal(t, exitFailed, code)
	require.ErrorContains(t, err, "host ha: ")
	assert.ErrorContains(t, err, ledger.ProblemUnknownKey)
	assert.NotContains(t, err.Error(), "host hb: ")

	// Kept downloads are ordinary ledgers.
	keep := filepath.Join(t.TempDir(), "dl")
	_, code, _ = ledgerRunCLI(t, "ledger", "verify", "--store", url, "--collab", "c1", "--download", keep)
	assert.Equal(t, exitOK, code)
	kept := filepath.Join(keep, "ha", "communication_ledger.jsonl")
	out, code, _ = ledgerRunCLI(t, "ledger", "verify", "--ledger", kept)
	assert.Equal(t, exitOK, code)
	assert.NotContains(t, out, "no head file")
	// A kept copy cut from its end shows it, as the host's ledger would.
	b, err := os.ReadFile(kept)
	require.NoError(t, err)
	lines := bytes.SplitAfter(b, []byte("\n"))
	require.NoError(t, os.WriteFile(kept, bytes.Join(lines[:len(lines)-2], nil), 0o600))
	_, code, err = ledgerRunCLI(t, "ledger", "verify", "--ledger", kept)
	assert.Equal(t, exitFailed, code)
	assert.ErrorContains(t, err, "records were removed from the end")

	// A chain edited in the store fails, and names its host.
	raw, err := os.ReadFile(filepath.Join(runsB, "communication_ledger.jsonl"))
	require.NoError(t, err)
	pub, err := os.ReadFile(filepath.Join(runsB, ledger.PublicKeyFile))
	require.NoError(t, err)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	key := &nats.Msg{Subject: "acp.c1.ledger.hz", Data: pub, Header: nats.Header{}}
	key.Header.Set("Acpfs-Ledger", "key")
	key.Header.Set("Acpfs-Ledger-After", "0 ")
	_, err = nc.RequestMsg(key, 5*time.Second)
	require.NoError(t, err)
	_, err = nc.Request("acp.c1.ledger.hz", bytes.Replace(raw, []byte("deliverables/design-spec.md"), []byte("deliverables/other.md"), 1), 5*time.Second)
	require.NoError(t, err)
	_, code, err = ledgerRunCLI(t, "ledger", "verify", "--store", url, "--collab", "c1")
	assert.Equal(t, exitFailed, code)
	// The edited seq 1 carries no hash (version 3): the chain shows the
	// edit where it is next stated, and names the records it could be.
	require.ErrorContains(t, err, "host hz: first bad seq 2")
	assert.ErrorContains(t, err, ledger.ProblemPrev)
	assert.ErrorContains(t, err, "one of seq 1–1")

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no ledger", []string{"ledger", "verify"}, `required flag(s) "ledger" not set`},
		{"both", []string{"ledger", "verify", "--ledger", "l", "--store", url, "--collab", "c1"}, "not both"},
		{"no collab", []string{"ledger", "verify", "--store", url}, "--store needs --collab"},
		{"repair", []string{"ledger", "verify", "--store", url, "--collab", "c1", "--repair"}, "local ledger"},
		{"unknown collab", []string{"ledger", "verify", "--store", url, "--collab", "c2"}, "collaboration c2: no such collaboration in the store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, code, err := ledgerRunCLI(t, tt.args...)
			assert.Equal(t, exitFailed, code)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestLedgerShowAndAuditStore(t *testing.T) {
	url, runsB := ledgerStoreHosts(t, true)

	out, code, err := ledgerRunCLI(t, "ledger", "show", "--store", url, "--collab", "c1", "--kind", "read")
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "HOST")
	assert.Contains(t, out, "3 record(s) of 2 host(s)")
	out, _, err = ledgerRunCLI(t, "ledger", "show", "--store", url, "--collab", "c1", "--path", "oracle/**", "--kind", "read", "--json")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1)
	assert.True(t, strings.HasPrefix(lines[0], `{"host":"hb","seq":2,`), lines[0])

	// Each host's records are judged against the grants the store holds
	// for it: no local grants directory is read.
	dir := t.TempDir()
	report := filepath.Join(dir, "audit.md")
	_, code, err = ledgerRunCLI(t, "audit", "--store", url, "--collab", "c1", "--out", report)
	assert.Equal(t, exitFailed, code)
	require.ErrorContains(t, err, "host hb: audit violated")
	assert.NotContains(t, err.Error(), "host ha:")
	for _, host := range []string{"ha", "hb"} {
		b, err := os.ReadFile(filepath.Join(dir, "audit."+host+".md"))
		require.NoError(t, err)
		assert.Contains(t, string(b), "Ledger: store:c1/"+host+"/communication", "named by host, not by the temporary directory")
		assert.Contains(t, string(b), "- Signatures: **verified**")
	}
	b, err := os.ReadFile(filepath.Join(dir, "audit.hb.md"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `forbidden\_read "oracle/\*\*"`, "judged by the store's G-bob")

	out, code, err = ledgerRunCLI(t, "ledger", "audit", "--store", url, "--collab", "c1", "--host", "ha")
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "isolated")

	for _, args := range [][]string{
		{"audit", "--runs", runsB, "--store", url, "--collab", "c1"},
		{"ledger", "audit", "--grants", filepath.Join(runsB, "context_grants"), "--store", url, "--collab", "c1"},
	} {
		_, code, err = ledgerRunCLI(t, args...)
		assert.Equal(t, exitFailed, code)
		assert.ErrorContains(t, err, "grants the store holds for that host", "%v", args)
	}
}

// TestLedgerAuditStoreGrantsOfTheHost: a host's records are judged against
// the grants that host applied, from the store, whatever a local grants
// directory says: here a local G-bob that allows the oracle clears no one.
func TestLedgerAuditStoreGrantsOfTheHost(t *testing.T) {
	url, runsB := ledgerStoreHosts(t, true)
	lax := filepath.Join(runsB, "context_grants", "G-bob.json")
	g, err := grants.Load(lax)
	require.NoError(t, err)
	g.ForbiddenRead = nil
	g.MayRead = append(g.MayRead, "oracle/**")
	data, err := json.Marshal(g)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(lax, data, 0o644))
	cwd := t.TempDir() // no run directory here either
	t.Chdir(cwd)

	out, code, err := ledgerRunCLI(t, "audit", "--store", url, "--collab", "c1", "--host", "hb", "--format", "json")
	assert.Equal(t, exitFailed, code)
	require.ErrorContains(t, err, "host hb: audit violated")
	var rep audit.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Agents, 1)
	assert.Equal(t, "bob", rep.Agents[0].Agent)
	assert.Equal(t, []string{"G-bob"}, rep.Agents[0].Grants, "only hb's grants, not ha's")
	require.Len(t, rep.Agents[0].Violations, 1)
	assert.Equal(t, "oracle/answers.md", rep.Agents[0].Violations[0].Path)
}
