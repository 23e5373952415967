package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/audit"
	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/ledger"
)

func init() { commands = append(commands, newLedgerCmd, newLedgerRunAuditCmd) }

func newLedgerCmd() *cobra.Command {
	return groupCmd("ledger", "Show, verify and audit the hash-chained communication ledger", "",
		newLedgerShowCmd(), newLedgerVerifyCmd(), newLedgerAuditCmd())
}

func newLedgerShowCmd() *cobra.Command {
	var (
		path, since, until string
		flt                ledger.Filter
		asJSON             bool
	)
	cmd := &cobra.Command{
		Use:   "show --ledger L [--agent A] [--grant G] [--kind K] [--path P] [--since T] [--until T] [--json]",
		Short: "List ledger records, filtered (a table, or JSON lines as stored)",
		Example: `  acpfs ledger show --ledger agent_runs/communication_ledger.jsonl --agent reviewer --kind read,list
  acpfs ledger show --ledger L --path 'oracle/**' --since 2h --json`,
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
				p := r.Path
				if p == "" && (r.Kind == ledger.KindList || r.Kind == ledger.KindRead) {
					p = "."
				}
				_, err := fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.At, r.Kind,
					ledgerCell(r.Agent), ledgerCell(r.Grant), ledgerCell(r.Op), ledgerCell(p), ledgerCell(r.Detail))
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
	f.StringVar(&flt.Grant, "grant", "", "only this grant id")
	f.StringSliceVar(&flt.Kinds, "kind", nil, "only these kinds (repeat or comma-separate): read, list, denied, ...")
	f.StringVar(&flt.Path, "path", "", "only paths matching this glob (with * ? [ {) or under this prefix")
	f.StringVar(&since, "since", "", "only records at or after: RFC 3339 time, a date, or a duration ago (90m)")
	f.StringVar(&until, "until", "", "only records before: same forms as --since")
	f.BoolVar(&asJSON, "json", false, "print JSON lines exactly as stored")
	_ = cmd.MarkFlagRequired("ledger")
	return cmd
}

// exitUnchecked is ledger verify's status for a sound chain whose
// signatures could not be checked for want of a public key: distinct from
// exitOK so that no script takes a ledger anyone could have written for a
// verified one.
const exitUnchecked = 5

// maxRepairSteps bounds verify --repair's steps (restore, cut, sign, ...).
const maxRepairSteps = 5

func newLedgerVerifyCmd() *cobra.Command {
	var (
		path    string
		pubkeys []string
		live    bool
		repair  bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "verify --ledger L [--pubkey FILE]... [--live] [--repair] [--json]",
		Short: "Check the hash chain and its signatures: exit 0 when sound, 2 with the first bad seq, 5 when no key was found",
		Long: `Verify recomputes every record's hash and checks every seq and prev link,
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

Exit status: 0 sound and signed; 2 broken (the first problem is printed);
5 the chain is sound but no public key was found, so signatures were not
checked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			var keys []ledger.PublicKey
			for _, p := range pubkeys {
				k, err := ledger.LoadPublicKey(p)
				if err != nil {
					return withCode(exitFailed, fmt.Errorf("--pubkey: %w", err))
				}
				keys = append(keys, k)
			}
			// Each repair step may uncover the next (a restored copy whose
			// tail its writer never signed): repeat until nothing is left.
			for step := 0; repair && step < maxRepairSteps; step++ {
				info, err := ledger.Repair(path)
				if err != nil {
					// Report the damage below; the repair error says why it
					// could not be repaired.
					fmt.Fprintf(cmd.ErrOrStderr(), "repair refused: %v\n", err)
					break
				}
				if info == nil {
					break
				}
				fmt.Fprintf(out, "repaired: %s\n", info.Summary())
			}
			rep, err := ledger.VerifyWith(path, ledger.VerifyOptions{Keys: keys, AllowUnsignedTail: live})
			if err != nil {
				return err
			}
			if asJSON {
				if err := protoPrintJSON(out, rep); err != nil {
					return err
				}
			} else {
				ledgerPrintVerify(out, rep)
			}
			if p := rep.Problem; p != nil {
				return withCode(exitFailed, fmt.Errorf("ledger %s is broken: %s", path, p.Error()))
			}
			if !rep.SignaturesChecked {
				return withCode(exitUnchecked, fmt.Errorf("ledger %s: %s beside it: the chain is sound, but anyone who can write the file could have written it; pass --pubkey FILE",
					path, ledger.WarnNoKey))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "ledger", "", "ledger file (required)")
	f.StringArrayVar(&pubkeys, "pubkey", nil, "public key file (ledger.pub) to check signatures with; repeatable (default: ledger.pub beside the ledger)")
	f.BoolVar(&live, "live", false, "the ledger is still being written: records after the last signature are a warning, not a problem")
	f.BoolVar(&repair, "repair", false, "repair what a crash or tampering left, recording each step, then verify")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	_ = cmd.MarkFlagRequired("ledger")
	return cmd
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
		fmt.Fprintf(w, "key %s: signed seq %s–%s in %s checkpoint(s)\n", s.Key, ledgerGroup(s.FirstSeq), ledgerGroup(s.LastSeq), ledgerGroup(int64(s.Checkpoints)))
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
	format string
	out    string
	folder string
	live   bool
}

func (af *ledgerAuditFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&af.format, "format", "md", "report format: md, json or html")
	cmd.Flags().StringVar(&af.out, "out", "", "write the report to this file instead of stdout")
	cmd.Flags().StringVar(&af.folder, "folder", "", "collaboration folder: list its files in the matrix even if untouched")
	cmd.Flags().BoolVar(&af.live, "live", false, "views are still mounted: also judge their last records, which a running writer signs within a second (without it, records no signature covers yet are not judged)")
}

// ledgerAuditExit is the exit-status paragraph of both audit commands.
const ledgerAuditExit = `Exit status: 0 when the verdict is isolated; 2 when it is violated or
unverified, which includes a broken chain, a record naming a grant not
given to the audit, and a ledger holding a "gap" record (records an operator
acknowledged as lost: no agent can be shown isolated for that period, and
the report says "N records acknowledged lost (seq A–B)"); 2 also when the
ledger or the grants cannot be read.`

// run audits, writes the report and turns the verdict into the exit code.
func (af *ledgerAuditFlags) run(cmd *cobra.Command, ledgerPath, grantsDir string) error {
	if err := protoChoice("format", af.format, []string{"md", "json", "html"}); err != nil {
		return err
	}
	gs, err := audit.LoadGrants(grantsDir)
	if err != nil {
		return withCode(exitFailed, err)
	}
	rep, err := ledgerAudit(ledgerPath, gs, af.folder, af.live)
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
	if rep.Verdict == audit.VerdictIsolated {
		return nil
	}
	var bad []string
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
	return withCode(exitFailed, fmt.Errorf("audit %s: %s", rep.Verdict, strings.Join(bad, "; ")))
}

// ledgerAudit checks the chain of the ledger at path, then feeds its
// records to the audit.
func ledgerAudit(path string, gs []audit.Grant, folder string, live bool) (*audit.Report, error) {
	chain, err := ledger.VerifyWith(path, ledger.VerifyOptions{AllowUnsignedTail: live})
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
	)
	cmd := &cobra.Command{
		Use:   "audit --ledger L --grants DIR [--format md|json|html] [--out FILE] [--folder F]",
		Short: "Judge each agent's reads and listings against its grant (exit 0 isolated, 2 otherwise)",
		Long: `Audit reads the ledger and, for each agent, every path it read or listed and
every refused attempt, and checks each read against its grant as the grant
files in DIR (G-*.json) say now. An agent is "isolated" when its grant allowed
every read and listing, "violated" when it read or listed something its grant
does not allow, "unverified" when a record names a grant that is not in DIR
or records were acknowledged lost. Aggregated repeats (read_repeat,
denied_repeat) count as the reads and refusals they repeat: each path is
listed once with its count. The HTML report is one self-contained page with
an agent × file matrix.

` + ledgerAuditExit,
		Example: `  acpfs ledger audit --ledger agent_runs/communication_ledger.jsonl --grants agent_runs/context_grants --format html --out audit.html`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.run(cmd, ledgerPath, grants)
		},
	}
	cmd.Flags().StringVar(&ledgerPath, "ledger", "", "ledger file (required)")
	cmd.Flags().StringVar(&grants, "grants", "", "directory of G-*.json grant files (required)")
	af.register(cmd)
	_ = cmd.MarkFlagRequired("ledger")
	_ = cmd.MarkFlagRequired("grants")
	return cmd
}

// newLedgerRunAuditCmd is `acpfs audit`, the run-directory shorthand.
func newLedgerRunAuditCmd() *cobra.Command {
	var (
		af   ledgerAuditFlags
		runs string
	)
	cmd := &cobra.Command{
		Use:   "audit --runs RUNDIR [--format md|json|html] [--out FILE] [--folder F]",
		Short: "Audit a run directory: its ledger against its context grants (exit 0 isolated, 2 otherwise)",
		Long: `Audit is "acpfs ledger audit" on a run directory: RUNDIR/communication_ledger.jsonl
judged against RUNDIR/context_grants.

` + ledgerAuditExit,
		Example: `  acpfs audit --runs agent_runs --format html --out audit.html`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.run(cmd, filepath.Join(runs, "communication_ledger.jsonl"), filepath.Join(runs, "context_grants"))
		},
	}
	cmd.Flags().StringVar(&runs, "runs", "", "run directory (required)")
	af.register(cmd)
	_ = cmd.MarkFlagRequired("runs")
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
