package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/audit"
	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/store"
)

func init() { register(newLedgerCmd, newLedgerRunAuditCmd) }

func newLedgerCmd() *cobra.Command {
	return groupCmd("ledger", "Show, verify and audit the hash-chained communication ledger", "",
		newLedgerShowCmd(), newLedgerVerifyCmd(), newLedgerAuditCmd())
}

func newLedgerShowCmd() *cobra.Command {
	var (
		path, since, until string
		kinds              []string
		flt                ledger.Filter
		asJSON             bool
		sf                 ledgerStoreFlags
	)
	cmd := &cobra.Command{
		Use:   "show (--ledger L | --store URL --collab C) [--agent A] [--grant G] [--kind K] [--path P] [--since T] [--until T] [--json]",
		Short: "List ledger records, filtered (a table, or one JSON line per record)",
		Long:  ledgerShowLong,
		Example: `  acpfs ledger show --ledger agent_runs/communication_ledger.jsonl --agent reviewer --kind read,list
  acpfs ledger show --ledger L --path 'oracle/**' --since 2h --json
  acpfs ledger show --store nats://10.0.0.5:4222 --collab design --agent reviewer`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			var err error
			if flt.Since, err = ledgerParseTime(since, now); err != nil {
				return withCode(exitFailed, fmt.Errorf("--since: %w", err))
			}
			if flt.Until, err = ledgerParseTime(until, now); err != nil {
				return withCode(exitFailed, fmt.Errorf("--until: %w", err))
			}
			if err := flt.Validate(); err != nil {
				return withCode(exitFailed, fmt.Errorf("--path: %w", err))
			}
			for _, k := range kinds {
				flt.Kinds = append(flt.Kinds, ledger.Kind(k))
			}
			if flt.Grant, err = ledgerGrantID(path, flt.Grant); err != nil {
				return withCode(exitFailed, fmt.Errorf("--grant: %w", err))
			}
			if remote, err := sf.check(path, "ledger"); err != nil {
				return withCode(exitFailed, err)
			} else if remote {
				return ledgerShowStore(cmd, &sf, flt, asJSON)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				return ledger.Scan(path, flt, func(r ledger.Record) error { return enc.Encode(r) })
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tAT\tKIND\tAGENT\tGRANT\tOP\tPATH\tDETAIL")
			n := 0
			err = ledger.Scan(path, flt, func(r ledger.Record) error {
				n++
				_, err := io.WriteString(tw, ledgerRow(r))
				return err
			})
			if ferr := tw.Flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%d record(s)\n", n)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "ledger", "", "ledger file (required)")
	f.StringVar(&flt.Agent, "agent", "", "only this agent")
	f.StringVar(&flt.Grant, "grant", "", "only this grant: its id, its agent (the active grant) or its file, looked up in the ledger's run directory")
	f.StringSliceVar(&kinds, "kind", nil, "only these kinds (repeat or comma-separate): read, list, denied, ...")
	f.StringVar(&flt.Path, "path", "", "only paths matching this glob (with * ? [ {) or under this prefix")
	f.StringVar(&since, "since", "", "only records at or after: RFC 3339 time, a date, or a duration ago (90m)")
	f.StringVar(&until, "until", "", "only records before: same forms as --since")
	f.BoolVar(&asJSON, "json", false, "print each record whole, as one JSON line")
	sf.register(cmd)
	return cmd
}

// ledgerShowLong is the help of acpfs ledger show.
const ledgerShowLong = `Show lists the records of a ledger (its sealed segments, then the file),
filtered. With --store and --collab it reads every host's ledger of the
collaboration from the store instead, and names each record's host (a HOST
column; with --json, a "host" field before the record's own).

With --json each record is printed whole, in the canonical field order:
the fields a version 3 line leaves out (agent, grant and pid when they
are the record before's, prev and hash on unsigned records) are put back,
so that a filtered line stands on its own. Records of version 1 and 2
files, and signed records of any version, come out exactly as stored.`

// ledgerRow is one record as a line of show's table.
func ledgerRow(r ledger.Record) string {
	p := r.Path
	if p == "" && (r.Kind == ledger.KindList || r.Kind == ledger.KindRead) {
		p = "."
	}
	return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.At, r.Kind,
		ledgerCell(r.Agent), ledgerCell(r.Grant), ledgerCell(string(r.Op)), ledgerCell(p), ledgerCell(r.Detail))
}

// exitUnchecked is ledger verify's status for a sound chain whose
// signatures could not be checked for want of a public key: distinct from
// exitOK so that no script takes a ledger anyone could have written for a
// verified one.
const exitUnchecked = 5

// maxRepairSteps bounds verify --repair's steps (restore, cut, sign, ...).
const maxRepairSteps = 5

// ledgerVerifyLong is the help of acpfs ledger verify.
const ledgerVerifyLong = `Verify recomputes every record's hash and checks every seq and prev link,
across the ledger's sealed segments (L's stem.<first seq>.jsonl beside it) and
then L. It reports the first record that was edited, removed, inserted, moved,
or is not a record at all, and a torn last line left by a crash.

With the public key (ledger.pub beside the ledger, or each --pubkey FILE) it
also checks every signature. Writers sign checkpoints as they write (within a
second, and always when they stop); each covers the whole chain before it, so a record forged, edited or removed with the chain
recomputed fails the next checkpoint ("forged"). It reports records signed by
a key it was not given ("unknown_key"), records after the last signature
("unsigned_tail"; only a warning with --live, for a ledger still being
written), and compares the head file (L.head, a copy of the latest checkpoint)
with the ledger: records cut from the end show as "truncated", a tail
rewritten from before the head as "rewritten". It prints which key signed
which records.

A ledger.pub found beside the ledger proves only as much as that directory is
trusted: keep a copy of ledger.pub (or the key id printed here) with each
deliverable, and pass it with --pubkey.

--repair is the operator's way back (docs/ledger.md): it puts back the copy a
stopped writer kept when the ledger was deleted or replaced, cuts a torn last
line, moves records no writer sealed aside, acknowledges records removed from
the end with a signed "gap" record, and signs a tail that a killed writer
sealed but did not sign. Each step is recorded; a record edited in place is
never repaired. A writer that stopped serves again once the ledger is back.

Keep the last hash it prints: it is what proves later that the tail was not
rewritten.

With --store and --collab, verify downloads every host's ledger of the
collaboration from the store (each host ships its own chain, see
docs/ledger.md) and verifies each with the keys that host published there,
or with the --pubkey keys only when given: a key read from the store proves
that the chain is intact, not who wrote it; pin each host's ledger.pub to
prove that. It prints a report per host and fails when any chain does.
--repair is for a local ledger only.

Exit status: 0 sound and signed; 2 broken (the first problem is printed);
5 the chain is sound but no public key was found, so signatures were not
checked.`

// ledgerVerifyFlags are acpfs ledger verify's flags.
type ledgerVerifyFlags struct {
	path    string
	pubkeys []string
	live    bool
	repair  bool
	asJSON  bool
	sf      ledgerStoreFlags
}

func newLedgerVerifyCmd() *cobra.Command {
	var vf ledgerVerifyFlags
	cmd := &cobra.Command{
		Use:   "verify (--ledger L | --store URL --collab C) [--pubkey FILE]... [--live] [--repair] [--json]",
		Short: "Check the hash chain and its signatures: exit 0 when sound, 2 with the first bad seq, 5 when no key was found",
		Long:  ledgerVerifyLong,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return vf.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&vf.path, "ledger", "", "ledger file (required)")
	f.StringArrayVar(&vf.pubkeys, "pubkey", nil, "public key file (ledger.pub) to check signatures with; repeatable (default: ledger.pub beside the ledger)")
	f.BoolVar(&vf.live, "live", false, "the ledger is still being written: records after the last signature are a warning, not a problem")
	f.BoolVar(&vf.repair, "repair", false, "repair what a crash or tampering left, recording each step, then verify")
	f.BoolVar(&vf.asJSON, "json", false, "print the report as JSON")
	vf.sf.register(cmd)
	return cmd
}

// run verifies a local ledger (repairing it first with --repair) or every
// host's ledger downloaded from the store.
func (vf *ledgerVerifyFlags) run(cmd *cobra.Command) error {
	remote, err := vf.sf.check(vf.path, "ledger")
	if err != nil {
		return withCode(exitFailed, err)
	}
	if remote && vf.repair {
		return withCode(exitFailed, errors.New("--repair repairs a local ledger: run it on the host that writes it"))
	}
	var keys []ledger.PublicKey
	for _, p := range vf.pubkeys {
		k, err := ledger.LoadPublicKey(p)
		if err != nil {
			return withCode(exitFailed, fmt.Errorf("--pubkey: %w", err))
		}
		keys = append(keys, k)
	}
	if remote {
		return ledgerVerifyStore(cmd, &vf.sf, keys, vf.live, vf.asJSON)
	}
	if vf.repair {
		ledgerRepair(cmd, vf.path)
	}
	rep, err := ledger.VerifyWith(vf.path, ledger.VerifyOptions{Keys: keys, AllowUnsignedTail: vf.live})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if vf.asJSON {
		if err := protoPrintJSON(out, rep); err != nil {
			return err
		}
	} else {
		ledgerPrintVerify(out, rep)
	}
	if p := rep.Problem; p != nil {
		return withCode(exitFailed, fmt.Errorf("ledger %s is broken: %s", vf.path, p.Error()))
	}
	if !rep.SignaturesChecked {
		return withCode(exitUnchecked, fmt.Errorf("ledger %s: %s beside it: the chain is sound, but anyone who can write the file could have written it; pass --pubkey FILE",
			vf.path, ledger.WarnNoKey))
	}
	return nil
}

// ledgerRepair runs verify --repair's steps on the ledger at path,
// printing each. Each step may uncover the next (a restored copy whose
// tail its writer never signed): it repeats until nothing is left. A
// refusal is printed, not returned: the verification that follows reports
// the damage, the refusal says why it could not be repaired.
func ledgerRepair(cmd *cobra.Command, path string) {
	for step := 0; step < maxRepairSteps; step++ {
		info, err := ledger.Repair(path)
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "repair refused: %v\n", err)
			return
		}
		if info == nil {
			return
		}
		fmt.Fprintf(cmd.OutOrStdout(), "repaired: %s\n", info.Summary())
	}
}

func ledgerPrintVerify(w io.Writer, rep *ledger.VerifyReport) {
	files := ""
	if n := len(rep.Files); n > 1 {
		files = fmt.Sprintf(" in %d files (%d sealed segment(s), then the live file)", n, n-1)
	}
	if rep.Problem != nil {
		fmt.Fprintf(w, "ledger %s: BROKEN after %s sound record(s)%s\n", rep.Path, ledgerGroup(rep.Records), files)
	} else {
		fmt.Fprintf(w, "ledger %s: valid chain, %s record(s)%s\n", rep.Path, ledgerGroup(rep.Records), files)
		if rep.Records > 0 {
			fmt.Fprintf(w, "last seq %s at %s\nlast hash %s\n", ledgerGroup(rep.LastSeq), rep.LastAt, rep.LastHash)
		}
	}
	for _, s := range rep.Signers {
		fmt.Fprintf(w, "key %s: signed seq %s–%s in %s checkpoint(s)\n", s.Key, ledgerGroup(s.FirstSeq), ledgerGroup(s.LastSeq), ledgerGroup(int64(s.SignedCheckpoints)))
	}
	if rep.SignaturesChecked && rep.Problem == nil {
		fmt.Fprintf(w, "signatures checked against key(s) %s", strings.Join(rep.Keys, ", "))
		if rep.Unsigned > 0 {
			fmt.Fprintf(w, "; %s record(s) after the last signature", ledgerGroup(rep.Unsigned))
		}
		if rep.HeadSeq > 0 {
			fmt.Fprintf(w, "; the head's checkpoint at seq %s is in the ledger", ledgerGroup(rep.HeadSeq))
		}
		fmt.Fprintln(w)
	}
	for _, r := range rep.Repairs {
		fmt.Fprintf(w, "repair recorded at seq %d (%s): %s\n", r.Seq, r.At, ledgerCell(r.Detail))
	}
	for _, m := range rep.Warnings {
		if m == ledger.WarnNoKey {
			fmt.Fprintln(w, m)
			continue
		}
		fmt.Fprintf(w, "warning: %s\n", m)
	}
}

// ledgerGroup writes n with thousands separators (52,113).
func ledgerGroup(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// ledgerAuditFlags are shared by `ledger audit` and `audit`.
type ledgerAuditFlags struct {
	format  string
	out     string
	folder  string
	live    bool
	pubkeys []string
}

// keys loads the --pubkey files.
func (af *ledgerAuditFlags) keys() ([]ledger.PublicKey, error) {
	var keys []ledger.PublicKey
	for _, p := range af.pubkeys {
		k, err := ledger.LoadPublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("--pubkey: %w", err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func (af *ledgerAuditFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&af.format, "format", "md", "report format: md, json or html")
	cmd.Flags().StringVar(&af.out, "out", "", "write the report to this file instead of stdout")
	cmd.Flags().StringVar(&af.folder, "folder", "", "collaboration folder: list its files in the matrix even if untouched")
	cmd.Flags().BoolVar(&af.live, "live", false, "views are still mounted: also judge their last records, which a running writer signs within a second (without it, records no signature covers yet are not judged)")
	cmd.Flags().StringArrayVar(&af.pubkeys, "pubkey", nil, "public key file (ledger.pub) to check signatures with, as ledger verify does; repeatable (default: ledger.pub beside the ledger; with --store, the keys each host published)")
}

// ledgerAuditSigs is the signatures paragraph of both audit commands.
const ledgerAuditSigs = `The audit checks the chain and its signatures exactly as "ledger verify"
does, and judges only the records a valid signature covers (with --live,
also the unsigned records a running writer has not signed yet). Without a
public key (ledger.pub beside the ledger, or --pubkey FILE) it judges
nothing and every agent is "unverified": a sound chain without signatures
is one anyone who can write the file could have rebuilt. A forged record,
a key it was not given or an unsigned tail leave every agent at best
"unverified" from there on. The report shows at its top the signature
status, the key id, how many records the signed checkpoints cover, and
lists each read's content SHA-256.

`

// ledgerAuditStore is the several-hosts paragraph of both audit commands.
const ledgerAuditStore = `With --store and --collab, the audit reads every host's ledger of the
collaboration from the store instead (docs/ledger.md, "Several hosts"),
checks each chain with the keys the host published there (or the --pubkey
keys), and judges each host's records against the grants the store holds
for that host (its grants bucket, <host>.<grant id>), not against a local
grants directory: one report per host, in host order (with --out FILE, one
file per host, FILE with the host before its extension: audit.html becomes
audit.HOST.html). It fails when any host's does.

`

// ledgerAuditExit is the exit-status paragraph of both audit commands.
const ledgerAuditExit = `Exit status: 0 when the verdict is isolated; 2 when it is violated or
unverified, which includes a broken chain, signatures that could not be
checked (no public key) or do not cover every record, a record naming a
grant not given to the audit, and a ledger holding a "gap" record (records
an operator acknowledged as lost: no agent can be shown isolated for that
period, and the report says "N records acknowledged lost (seq A–B)"); 2
also when the ledger or the grants cannot be read.`

// run audits, writes the report and turns the verdict into the exit code.
func (af *ledgerAuditFlags) run(cmd *cobra.Command, ledgerPath, grantsDir string) error {
	if err := protoChoice("format", af.format, []string{"md", "json", "html"}); err != nil {
		return err
	}
	keys, err := af.keys()
	if err != nil {
		return withCode(exitFailed, err)
	}
	gs, err := audit.LoadGrants(grantsDir)
	if err != nil {
		return withCode(exitFailed, err)
	}
	rep, err := ledgerAuditKeys(ledgerPath, keys, gs, af.folder, af.live)
	if err != nil {
		return withCode(exitFailed, err)
	}
	if af.out == "" {
		if err := rep.Render(cmd.OutOrStdout(), af.format); err != nil {
			return err
		}
	} else if err := ledgerWriteReport(af.out, rep, af.format); err != nil {
		return err
	}
	if err := ledgerAuditFailure(rep); err != nil {
		return withCode(exitFailed, err)
	}
	return nil
}

// ledgerAuditFailure says why a report's verdict is not isolated, or nil.
func ledgerAuditFailure(rep *audit.Report) error {
	if rep.Verdict == audit.VerdictIsolated {
		return nil
	}
	var bad []string
	if sg := rep.Signatures; !sg.Verified() && sg.Status != audit.SigNotChecked {
		// First: it says why every agent is at best unverified, and what
		// to pass.
		bad = append(bad, fmt.Sprintf("signatures: %s: %s", sg.Status, sg.Detail))
	}
	for _, ag := range rep.Agents {
		if ag.Verdict != audit.VerdictIsolated {
			bad = append(bad, fmt.Sprintf("%s %s (%s)", ag.Agent, ag.Verdict, ag.Reason))
		}
	}
	if rep.Chain != nil && rep.Chain.Problem != nil {
		bad = append(bad, "ledger chain broken at seq "+fmt.Sprint(rep.Chain.Problem.Seq))
	}
	for _, g := range rep.Gaps {
		bad = append(bad, g.String())
	}
	return fmt.Errorf("audit %s: %s", rep.Verdict, strings.Join(bad, "; "))
}

// ledgerAuditKeys checks the chain of the ledger at path and its
// signatures with keys (default: ledger.pub beside the ledger), with
// ledger verify's own check, then feeds its records to the audit, which
// judges those the check vouches for.
func ledgerAuditKeys(path string, keys []ledger.PublicKey, gs []audit.Grant, folder string, live bool) (*audit.Report, error) {
	chain, err := ledger.VerifyWith(path, ledger.VerifyOptions{Keys: keys, AllowUnsignedTail: live})
	if err != nil {
		return nil, err
	}
	a := audit.New(gs, audit.Options{Ledger: path, Chain: chain, Folder: folder, Live: live})
	if err := a.AddFile(path); err != nil {
		return nil, err
	}
	return a.Report()
}

// ledgerWriteReport replaces dst with the report, so that a reviewer
// never picks up half a report.
func ledgerWriteReport(dst string, rep *audit.Report, format string) error {
	if err := atomicfile.Write(dst, 0o644, func(w io.Writer) error { return rep.Render(w, format) }); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func newLedgerAuditCmd() *cobra.Command {
	var (
		af                 ledgerAuditFlags
		ledgerPath, grants string
		sf                 ledgerStoreFlags
	)
	cmd := &cobra.Command{
		Use:   "audit (--ledger L --grants DIR | --store URL --collab C) [--pubkey FILE]... [--format md|json|html] [--out FILE] [--folder F]",
		Short: "Judge each agent's reads and listings against its grant (exit 0 isolated, 2 otherwise)",
		Long: `Audit reads the ledger and, for each agent, every path it read or listed and
every refused attempt, and checks each read against its grant as the grant
files in DIR (G-*.json) say now. An agent is "isolated" when its grant allowed
every read and listing, "violated" when it read or listed something its grant
does not allow, "unverified" when a record names a grant that is not in DIR
or records were acknowledged lost. Aggregated repeats (denied_repeat, and
read_repeat of older ledgers) count as the reads and refusals they repeat:
each path is listed once with its count. Repeated reads (reads_repeated)
are counted per agent, judged by when they happened. The HTML report is one
self-contained page with an agent × file matrix.

` + ledgerAuditSigs + ledgerAuditStore + ledgerAuditExit,
		Example: `  acpfs ledger audit --ledger agent_runs/communication_ledger.jsonl --grants agent_runs/context_grants --format html --out audit.html`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if remote, err := sf.check(ledgerPath, "ledger"); err != nil {
				return withCode(exitFailed, err)
			} else if remote {
				if grants != "" {
					return withCode(exitFailed, errors.New(ledgerStoreGrantsNote("--grants")))
				}
				return af.runStore(cmd, &sf)
			}
			if grants == "" {
				return withCode(exitFailed, errors.New(`required flag(s) "grants" not set`))
			}
			return af.run(cmd, ledgerPath, grants)
		},
	}
	cmd.Flags().StringVar(&ledgerPath, "ledger", "", "ledger file (required unless --store)")
	cmd.Flags().StringVar(&grants, "grants", "", "directory of G-*.json grant files (required unless --store)")
	af.register(cmd)
	sf.register(cmd)
	return cmd
}

// newLedgerRunAuditCmd is `acpfs audit`, the run-directory shorthand.
func newLedgerRunAuditCmd() *cobra.Command {
	var (
		af   ledgerAuditFlags
		runs string
		sf   ledgerStoreFlags
	)
	cmd := &cobra.Command{
		Use:   "audit (--runs RUNDIR | --store URL --collab C) [--pubkey FILE]... [--format md|json|html] [--out FILE] [--folder F]",
		Short: "Audit a run directory: its ledger against its context grants (exit 0 isolated, 2 otherwise)",
		Long: `Audit is "acpfs ledger audit" on a run directory: RUNDIR/communication_ledger.jsonl
judged against RUNDIR/context_grants.

` + ledgerAuditSigs + ledgerAuditStore + ledgerAuditExit,
		Example: `  acpfs audit --runs agent_runs --format html --out audit.html`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sf.url != "" {
				if runs != "" {
					return withCode(exitFailed, errors.New(ledgerStoreGrantsNote("--runs")))
				}
				if _, err := sf.check("", "ledger"); err != nil {
					return withCode(exitFailed, err)
				}
				return af.runStore(cmd, &sf)
			}
			if runs == "" {
				return withCode(exitFailed, errors.New(`required flag(s) "runs" not set (or --store with --collab)`))
			}
			return af.run(cmd, filepath.Join(runs, "communication_ledger.jsonl"), filepath.Join(runs, "context_grants"))
		},
	}
	cmd.Flags().StringVar(&runs, "runs", "", "run directory (required unless --store)")
	af.register(cmd)
	sf.register(cmd)
	return cmd
}

// ledgerParseTime accepts RFC 3339 (with or without zone), a date, or a
// duration meaning that long before now.
func ledgerParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d.Abs()), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("want an RFC 3339 time, a date (2006-01-02) or a duration (90m)")
}

// ledgerCell makes agent-controlled text safe for one terminal table cell:
// control characters (escape sequences, tabs, newlines) are shown escaped.
func ledgerCell(s string) string {
	if s == "" {
		return "-"
	}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsPrint(r) || r == ' ' {
			b.WriteRune(r)
			continue
		}
		q := fmt.Sprintf("%q", string(r))
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// ledgerStoreFlags select the collaboration whose hosts' ledgers `ledger
// verify`, `ledger show` and the audits read from a store instead of one
// local file.
type ledgerStoreFlags struct {
	url, collab, keep string
	hosts             []string
	// withGrants makes download read the store's grants too.
	withGrants bool
}

func (sf *ledgerStoreFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&sf.url, "store", "", "read every host's ledger from this NATS JetStream store (nats://HOST:PORT) instead of --ledger")
	f.StringVar(&sf.collab, "collab", "", "with --store: the collaboration's name")
	f.StringSliceVar(&sf.hosts, "host", nil, "with --store: only these hosts (repeat or comma-separate)")
	f.StringVar(&sf.keep, "download", "", "with --store: keep the downloaded ledgers in this new directory (default: a temporary directory, removed)")
}

// check says whether the store is used, and refuses a mix of a local
// ledger and a store, or neither.
func (sf *ledgerStoreFlags) check(local, localFlag string) (bool, error) {
	switch {
	case sf.url != "" && local != "":
		return false, fmt.Errorf("give --%s or --store, not both", localFlag)
	case sf.url == "" && local == "":
		return false, fmt.Errorf(`required flag(s) "%s" not set (or --store with --collab)`, localFlag)
	case sf.url == "" && (sf.collab != "" || len(sf.hosts) > 0 || sf.keep != ""):
		return false, errors.New("--collab, --host and --download go with --store")
	case sf.url != "" && sf.collab == "":
		return false, errors.New("--store needs --collab")
	}
	return sf.url != "", nil
}

// ledgerDownload is every host's ledger of a collaboration, downloaded.
type ledgerDownload struct {
	dir   string
	label string // what reports call dir
	hosts []store.HostLedger
	// grants are the store's grants of every host (with withGrants).
	grants []store.GrantEntry
	temp   bool
}

// download fetches the hosts' ledgers into a private directory.
func (sf *ledgerStoreFlags) download(cmd *cobra.Command) (*ledgerDownload, error) {
	dl := &ledgerDownload{}
	var err error
	if sf.keep != "" {
		if err := os.Mkdir(sf.keep, 0o700); err != nil {
			return nil, fmt.Errorf("--download: %w", err)
		}
		dl.dir, dl.label = sf.keep, sf.keep
	} else {
		if dl.dir, err = os.MkdirTemp("", "acpfs-ledgers-"); err != nil {
			return nil, err
		}
		dl.temp, dl.label = true, "store:"+sf.collab
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	s, err := store.Open(ctx, store.Options{URL: sf.url, Collab: sf.collab, Existing: true})
	if err != nil {
		dl.close()
		return nil, err
	}
	defer s.Close()
	all, err := s.FetchLedgers(ctx, dl.dir)
	if err != nil {
		dl.close()
		return nil, fmt.Errorf("download the ledgers of %s: %w", sf.collab, err)
	}
	if sf.withGrants {
		if dl.grants, err = s.Grants(); err != nil {
			dl.close()
			return nil, fmt.Errorf("read the grants of %s: %w", sf.collab, err)
		}
	}
	for _, h := range all {
		if len(sf.hosts) == 0 || slices.Contains(sf.hosts, h.Host) {
			dl.hosts = append(dl.hosts, h)
		}
	}
	if len(dl.hosts) == 0 {
		dl.close()
		return nil, fmt.Errorf("no host has shipped a ledger to collaboration %s in %s%s", sf.collab, sf.url, ledgerHostsNote(sf.hosts))
	}
	return dl, nil
}

func ledgerHostsNote(hosts []string) string {
	if len(hosts) == 0 {
		return ""
	}
	return " (of hosts " + strings.Join(hosts, ", ") + ")"
}

func (dl *ledgerDownload) close() {
	if dl.temp {
		_ = os.RemoveAll(dl.dir)
	}
}

// name shows a downloaded file's path as reports should: under the
// store's name, not a temporary directory that is gone by then.
func (dl *ledgerDownload) name(s string) string {
	return strings.ReplaceAll(s, dl.dir, dl.label)
}

func (dl *ledgerDownload) relabel(rep *ledger.VerifyReport) {
	rep.Path = dl.name(rep.Path)
	for i := range rep.Files {
		rep.Files[i] = dl.name(rep.Files[i])
	}
	for i := range rep.Warnings {
		rep.Warnings[i] = dl.name(rep.Warnings[i])
	}
	if p := rep.Problem; p != nil {
		p.File, p.Reason = dl.name(p.File), dl.name(p.Reason)
	}
}

// keysFor returns the keys a host's chain is checked with: those the
// reviewer pinned, or else those the host published to the store.
func keysFor(h store.HostLedger, pinned []ledger.PublicKey) []ledger.PublicKey {
	if len(pinned) > 0 {
		return pinned
	}
	return h.Keys
}

// ledgerVerifyStore verifies every host's chain of a collaboration.
func ledgerVerifyStore(cmd *cobra.Command, sf *ledgerStoreFlags, pinned []ledger.PublicKey, live, asJSON bool) error {
	dl, err := sf.download(cmd)
	if err != nil {
		return withCode(exitFailed, err)
	}
	defer dl.close()
	out := cmd.OutOrStdout()
	type hostReport struct {
		Host   string               `json:"host"`
		Report *ledger.VerifyReport `json:"report"`
	}
	var (
		reps              []hostReport
		broken, unchecked []string
	)
	for _, h := range dl.hosts {
		rep, err := ledger.VerifyWith(h.Path, ledger.VerifyOptions{Keys: keysFor(h, pinned), AllowUnsignedTail: live})
		if err != nil {
			return withCode(exitFailed, fmt.Errorf("host %s: %w", h.Host, err))
		}
		dl.relabel(rep)
		reps = append(reps, hostReport{h.Host, rep})
		if !asJSON {
			fmt.Fprintf(out, "host %s:\n", h.Host)
			ledgerPrintVerify(out, rep)
		}
		switch {
		case rep.Problem != nil:
			broken = append(broken, fmt.Sprintf("host %s: %s", h.Host, rep.Problem.Error()))
		case !rep.SignaturesChecked:
			unchecked = append(unchecked, h.Host)
		}
	}
	if asJSON {
		if err := protoPrintJSON(out, reps); err != nil {
			return err
		}
	}
	if len(broken) > 0 {
		return withCode(exitFailed, fmt.Errorf("ledger of %s is broken: %s", sf.collab, strings.Join(broken, "; ")))
	}
	if len(unchecked) > 0 {
		return withCode(exitUnchecked, fmt.Errorf("hosts %s published no public key to %s: their chains are sound, but anyone who can publish to the store could have written them; pass --pubkey FILE",
			strings.Join(unchecked, ", "), sf.collab))
	}
	return nil
}

// ledgerShowStore lists the records of every host's ledger, each with its
// host.
func ledgerShowStore(cmd *cobra.Command, sf *ledgerStoreFlags, flt ledger.Filter, asJSON bool) error {
	dl, err := sf.download(cmd)
	if err != nil {
		return withCode(exitFailed, err)
	}
	defer dl.close()
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		for _, h := range dl.hosts {
			err := ledger.Scan(h.Path, flt, func(r ledger.Record) error {
				return enc.Encode(struct {
					Host string `json:"host"`
					ledger.Record
				}{h.Host, r})
			})
			if err != nil {
				return fmt.Errorf("host %s: %w", h.Host, errors.New(dl.name(err.Error())))
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tSEQ\tAT\tKIND\tAGENT\tGRANT\tOP\tPATH\tDETAIL")
	n := 0
	for _, h := range dl.hosts {
		err = ledger.Scan(h.Path, flt, func(r ledger.Record) error {
			n++
			_, err := fmt.Fprintf(tw, "%s\t%s", h.Host, ledgerRow(r))
			return err
		})
		if err != nil {
			err = fmt.Errorf("host %s: %w", h.Host, errors.New(dl.name(err.Error())))
			break
		}
	}
	if ferr := tw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d record(s) of %d host(s)\n", n, len(dl.hosts))
	return nil
}

// ledgerStoreGrantsNote refuses a local grants flag next to --store.
func ledgerStoreGrantsNote(flag string) string {
	return "with --store each host's records are judged against the grants the store holds for that host; " + flag + " is for a local ledger"
}

// runStore audits every host's ledger of a collaboration against the
// grants the store holds for that host: one report per host.
func (af *ledgerAuditFlags) runStore(cmd *cobra.Command, sf *ledgerStoreFlags) error {
	if err := protoChoice("format", af.format, []string{"md", "json", "html"}); err != nil {
		return err
	}
	pinned, err := af.keys()
	if err != nil {
		return withCode(exitFailed, err)
	}
	sf.withGrants = true
	dl, err := sf.download(cmd)
	if err != nil {
		return withCode(exitFailed, err)
	}
	defer dl.close()
	var bad []string
	for _, h := range dl.hosts {
		gs, err := ledgerHostGrants(dl.grants, h.Host)
		if err != nil {
			return withCode(exitFailed, err)
		}
		rep, err := ledgerAuditKeys(h.Path, keysFor(h, pinned), gs, af.folder, af.live)
		if err != nil {
			return withCode(exitFailed, fmt.Errorf("host %s: %w", h.Host, err))
		}
		rep.Ledger = dl.name(rep.Ledger)
		if rep.Chain != nil {
			dl.relabel(rep.Chain)
		}
		if af.out == "" {
			if len(dl.hosts) > 1 && af.format == "md" {
				fmt.Fprintf(cmd.OutOrStdout(), "# Host %s\n\n", h.Host)
			}
			if err := rep.Render(cmd.OutOrStdout(), af.format); err != nil {
				return err
			}
		} else if err := ledgerWriteReport(ledgerHostFile(af.out, h.Host), rep, af.format); err != nil {
			return err
		}
		if err := ledgerAuditFailure(rep); err != nil {
			bad = append(bad, "host "+h.Host+": "+err.Error())
		}
	}
	if len(bad) > 0 {
		return withCode(exitFailed, errors.New(strings.Join(bad, "; ")))
	}
	return nil
}

// ledgerHostGrants compiles the store's grants of host for the audit: the
// grants the store assigned that host to apply (its views record the hash
// of the version they applied, which the audit compares).
func ledgerHostGrants(all []store.GrantEntry, host string) ([]audit.Grant, error) {
	var out []audit.Grant
	for _, e := range all {
		if e.Host != host {
			continue
		}
		g, err := audit.NewGrant(e.Grant)
		if err != nil {
			return nil, fmt.Errorf("host %s: grant %s from the store: %w", host, e.Grant.GrantID, err)
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b audit.Grant) int { return strings.Compare(a.GrantID, b.GrantID) })
	return out, nil
}

// ledgerHostFile names a host's report: audit.html becomes
// audit.HOST.html.
func ledgerHostFile(out, host string) string {
	ext := filepath.Ext(out)
	return strings.TrimSuffix(out, ext) + "." + host + ext
}
