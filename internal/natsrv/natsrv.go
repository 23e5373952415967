// Package natsrv starts a NATS server with JetStream inside the calling
// process: tests and the multi-host demo use it, so neither needs a
// server installed.
package natsrv

import (
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config describes one server, alone or as a node of a cluster.
type Config struct {
	// Name is the server's name; nodes of a cluster need distinct ones.
	Name string
	// Dir holds JetStream's files.
	Dir string
	// Host and Port to listen on for clients (Port -1: any free port).
	Host string
	Port int
	// Cluster: the name, this node's route port, and the other nodes'
	// route URLs (nats-route://127.0.0.1:PORT). Empty: no cluster.
	Cluster     string
	ClusterPort int
	Routes      []string
}

// Start runs a server and waits until it accepts clients.
func Start(c Config) (*server.Server, error) {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	o := &server.Options{
		ServerName: c.Name,
		Host:       c.Host,
		Port:       c.Port,
		JetStream:  true,
		StoreDir:   c.Dir,
		NoLog:      true,
		NoSigs:     true,
		// A test machine's JetStream limits: small, so several servers fit.
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  1 << 30,
	}
	if c.Cluster != "" {
		o.Cluster = server.ClusterOpts{Name: c.Cluster, Host: c.Host, Port: c.ClusterPort}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("route %q: %w", r, err)
			}
			o.Routes = append(o.Routes, u)
		}
	}
	s, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("nats server %s: %w", c.Name, err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats server %s did not start within 30 s", c.Name)
	}
	return s, nil
}
