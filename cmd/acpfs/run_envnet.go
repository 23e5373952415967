package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/internal/egress"
	"github.com/acpfs/acpfs/internal/sandbox"
)

// inheritEnvHelp says what --inherit-env gives away.
const inheritEnvHelp = "give the command the caller's whole environment instead of the minimal one: every API key, token, " +
	"password and agent socket path of this shell (AWS_*, GITHUB_TOKEN, SSH_AUTH_SOCK, ...) then reaches the sandboxed, untrusted " +
	"command, which may send them anywhere it can reach. Prefer --env NAME for the few it needs"

// runEnvNet are the flags of `acpfs run` that choose the command's
// environment and network.
type runEnvNet struct {
	nets, vars, files, resolve []string
	inherit                    bool
}

func (f *runEnvNet) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.nets, "net", []string{egress.ModeHost}, "network: host (the host's own), none (a loopback of its own), "+
		"or allow=HOST[:PORT],... (a loopback of its own and the named hosts through a proxy, each connection recorded in the ledger; "+
		"a port defaults to 443, *.example.com names every host below example.com; repeatable)")
	fl.StringArrayVar(&f.resolve, "resolve", nil, "with --net allow: the proxy resolves NAME to IP instead of asking DNS (NAME=IP; repeatable): "+
		"a model API on this machine or network, which must still be allowed by name")
	fl.StringArrayVar(&f.vars, "env", nil, "also give the command NAME (the caller's value) or NAME=VALUE (repeatable)")
	fl.StringArrayVar(&f.files, "env-file", nil, "also give the command the NAME=VALUE lines of FILE (# comments; repeatable)")
	fl.BoolVar(&f.inherit, "inherit-env", false, inheritEnvHelp)
}

// build returns the network mode, the egress policy and the command's
// environment.
func (f *runEnvNet) build(agent string) (string, egress.Policy, []string, error) {
	mode, rules, err := egress.ParseNet(f.nets)
	if err != nil {
		return "", egress.Policy{}, nil, err
	}
	hosts, err := egress.ParseResolve(f.resolve)
	if err != nil {
		return "", egress.Policy{}, nil, err
	}
	if len(hosts) > 0 && mode != egress.ModeAllow {
		return "", egress.Policy{}, nil, errors.New("--resolve applies to --net allow= only")
	}
	env, err := sandbox.BuildEnv(sandbox.EnvOptions{Caller: os.Environ(), Inherit: f.inherit, Vars: f.vars, Files: f.files, Agent: agent})
	if err != nil {
		return "", egress.Policy{}, nil, err
	}
	if mode == egress.ModeAllow {
		// The proxy is the only way out: whatever proxy the caller's
		// variables name could not be reached anyway.
		env = sandbox.SetEnv(env, sandbox.ProxyEnv(egress.ProxyPort))
	}
	return mode, egress.Policy{Allow: rules, Resolve: hosts}, env, nil
}
