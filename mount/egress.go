package mount

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/egress"
	"github.com/acpfs/acpfs/ledger"
)

// startEgress starts the egress proxy of `acpfs run --net allow=` on a
// unix socket in a directory of the run's private temporary directory
// (only root may reach it; the sandbox's first process bridges it into
// the command's network namespace). It returns a function that stops
// the proxy, and the socket's path.
func startEgress(p egress.Policy, g *grants.Grant, lw *ledger.Writer, tmp string) (func(), string, error) {
	dir := filepath.Join(tmp, "egress")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("egress proxy: %w", err)
	}
	sock := filepath.Join(dir, "proxy.sock")
	s, err := egress.Listen(sock, egress.Config{Policy: p, Agent: g.AgentID, Grant: g.GrantID, Ledger: lw})
	if err != nil {
		return nil, "", err
	}
	return func() {
		if err := s.Close(); err != nil {
			slog.Warn("stop the egress proxy", "err", err)
		}
	}, sock, nil
}
