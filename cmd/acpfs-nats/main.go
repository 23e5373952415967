// Command acpfs-nats runs a NATS server with JetStream for trying acpfs's
// multi-host mode (make demo-cluster) without installing a server: it
// embeds the server module. Production deployments run nats-server
// itself.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/acpfs/acpfs/internal/natsrv"
)

func main() {
	var c natsrv.Config
	var routes string
	flag.StringVar(&c.Name, "name", "acpfs-nats", "server name (distinct per cluster node)")
	flag.StringVar(&c.Dir, "dir", "", "JetStream storage directory (required)")
	flag.StringVar(&c.Host, "host", "127.0.0.1", "address to listen on")
	flag.IntVar(&c.Port, "port", 4222, "client port (-1: any free port)")
	flag.StringVar(&c.Cluster, "cluster", "", "cluster name (empty: a single server)")
	flag.IntVar(&c.ClusterPort, "cluster-port", 6222, "route port, with --cluster")
	flag.StringVar(&routes, "routes", "", "other nodes' routes, comma-separated nats-route://HOST:PORT")
	flag.Parse()
	if c.Dir == "" {
		fmt.Fprintln(os.Stderr, "error: --dir is required")
		os.Exit(2)
	}
	if routes != "" {
		c.Routes = strings.Split(routes, ",")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	s, err := natsrv.Start(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	fmt.Println(s.ClientURL())
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
}
