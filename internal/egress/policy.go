// Package egress is the network allow-list of `acpfs run --net
// allow=...`: a proxy on the host side, speaking HTTP (CONNECT and
// absolute-URI requests) and SOCKS5 on a unix socket, that connects the
// sandboxed command to the hosts its caller named and to nothing else,
// and records every connection it allows or refuses in the ledger.
//
// The command runs in a network namespace of its own that holds only a
// loopback; the sandbox's first process bridges 127.0.0.1:ProxyPort there
// to the proxy's socket (see internal/sandbox). Names are resolved here,
// on the host side: the sandbox has no DNS.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Network modes of `acpfs run --net`, as internal/sandbox names them.
const (
	ModeHost  = "host"
	ModeNone  = "none"
	ModeAllow = "allow"
)

// DefaultPort is the port a rule without one allows: HTTPS only. Plain
// HTTP (80) or any other port must be named.
const DefaultPort = 443

// Rule is one allowed destination.
type Rule struct {
	// Host is a lower-case name without a trailing dot, or an IP address;
	// for a wildcard, the suffix after "*." ("example.com").
	Host string `json:"host"`
	// Wildcard rules ("*.example.com") match every name below Host, not
	// Host itself.
	Wildcard bool `json:"wildcard,omitempty"`
	Port     int  `json:"port"`
}

func (r Rule) String() string {
	h := r.Host
	if r.Wildcard {
		h = "*." + h
	} else if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(r.Port)
}

// Policy is what the proxy lets through.
type Policy struct {
	Allow []Rule `json:"allow"`
	// Resolve maps names to addresses the proxy uses instead of asking
	// DNS (--resolve NAME=IP): a model API on this machine or on the
	// local network, a test's fake one.
	Resolve map[string]netip.Addr `json:"resolve,omitempty"`
}

// ParseNet parses the values of `acpfs run --net`: "host", "none", or
// one or more "allow=HOST[:PORT],..." (repeatable, comma lists). It
// returns the mode and, for allow, the rules.
func ParseNet(values []string) (string, []Rule, error) {
	var rules []Rule
	mode := ""
	for _, v := range values {
		m := v
		list, isAllow := strings.CutPrefix(v, "allow=")
		if isAllow {
			m = ModeAllow
		}
		switch {
		case m != ModeHost && m != ModeNone && m != ModeAllow:
			return "", nil, fmt.Errorf("--net %q: want host, none or allow=HOST[:PORT],...", v)
		case mode != "" && mode != m:
			return "", nil, fmt.Errorf("--net %s and --net %s: give one network mode", mode, m)
		}
		mode = m
		if isAllow {
			rs, err := ParseAllow(list)
			if err != nil {
				return "", nil, fmt.Errorf("--net %s: %w", v, err)
			}
			rules = append(rules, rs...)
		}
	}
	if mode == "" {
		mode = ModeHost
	}
	return mode, rules, nil
}

// ParseAllow parses a comma-separated list of HOST[:PORT]: a name, a
// wildcard "*.example.com", an IPv4 address or a bracketed IPv6 one
// ("[::1]:8080"). A rule without a port allows DefaultPort only.
func ParseAllow(list string) ([]Rule, error) {
	var out []Rule
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		r, err := parseRule(item)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("no host given (allow=HOST[:PORT],...)")
	}
	return out, nil
}

func parseRule(item string) (Rule, error) {
	host, port, err := splitHostPort(item)
	if err != nil {
		return Rule{}, fmt.Errorf("%q: %w", item, err)
	}
	r := Rule{Port: DefaultPort}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return Rule{}, fmt.Errorf("%q: port %q: want 1-65535", item, port)
		}
		r.Port = p
	}
	if a, err := netip.ParseAddr(host); err == nil {
		r.Host = a.Unmap().String()
		return r, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard, host = true, rest
	}
	name, err := normalName(host)
	if err != nil {
		return Rule{}, fmt.Errorf("%q: %w", item, err)
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		return Rule{}, fmt.Errorf("%q: a wildcard needs a domain of at least two labels (*.example.com)", item)
	}
	r.Host = name
	return r, nil
}

// splitHostPort splits HOST[:PORT]; the port may be absent, an IPv6
// address with a port must be bracketed.
func splitHostPort(s string) (string, string, error) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		host, after, ok := strings.Cut(rest, "]")
		if !ok {
			return "", "", errors.New("missing ]")
		}
		if after == "" {
			return host, "", nil
		}
		port, ok := strings.CutPrefix(after, ":")
		if !ok {
			return "", "", errors.New("want [IPv6]:PORT")
		}
		return host, port, nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", nil
	case 1:
		host, port, _ := strings.Cut(s, ":")
		return host, port, nil
	}
	return s, "", nil // a bare IPv6 address
}

// normalName checks a host name and returns it in lower case, without a
// trailing dot.
func normalName(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" || len(h) > 253 {
		return "", errors.New("not a host name")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", errors.New("not a host name (empty or overlong label)")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("not a host name (character %q)", c)
			}
		}
	}
	return h, nil
}

// ParseResolve parses the values of --resolve NAME=IP.
func ParseResolve(values []string) (map[string]netip.Addr, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := map[string]netip.Addr{}
	for _, v := range values {
		name, ip, ok := strings.Cut(v, "=")
		if !ok {
			return nil, fmt.Errorf("--resolve %q: want NAME=IP", v)
		}
		n, err := normalName(name)
		if err != nil {
			return nil, fmt.Errorf("--resolve %q: %w", v, err)
		}
		a, err := netip.ParseAddr(strings.Trim(ip, "[]"))
		if err != nil {
			return nil, fmt.Errorf("--resolve %q: %w", v, err)
		}
		out[n] = a.Unmap()
	}
	return out, nil
}

// Match returns the rule that allows host:port, if any; host is a name
// or an address as the client gave it. An exact rule wins over a
// wildcard (it alone may lead to a private address).
func (p *Policy) Match(host string, port int) (Rule, bool) {
	h := normalHost(host)
	var found Rule
	ok := false
	for _, r := range p.Allow {
		if r.Port != port {
			continue
		}
		switch {
		case !r.Wildcard && r.Host == h:
			return r, true
		case r.Wildcard && strings.HasSuffix(h, "."+r.Host) && !ok:
			found, ok = r, true
		}
	}
	return found, ok
}

// normalHost is how a client's host compares with the rules: lower case,
// no trailing dot, no brackets, an address in its canonical form.
func normalHost(h string) string {
	h = strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), "."))
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return h
}

// Internal tells whether a is an address of this machine or of a
// private network (loopback, private, link-local, unique local, shared
// address space, unspecified, multicast): what only a rule naming the
// host exactly may lead to, so that a wildcard or a public name whose
// DNS answer points inside does not open the host or its network.
func Internal(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is6() {
		// An IPv4 address written as IPv6 (compatible ::a.b.c.d, or
		// NAT64 64:ff9b::a.b.c.d) is judged as the IPv4 address it
		// leads to.
		b := a.As16()
		if v4, ok := embeddedV4(b); ok {
			if Internal(v4) {
				return true
			}
		}
	}
	switch {
	case a.IsLoopback(), a.IsPrivate(), a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(),
		a.IsInterfaceLocalMulticast(), a.IsMulticast(), a.IsUnspecified():
		return true
	}
	for _, p := range internalPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return localAddr(a)
}

// embeddedV4 is the IPv4 address an IPv4-compatible (::a.b.c.d) or
// well-known NAT64 (64:ff9b::a.b.c.d) IPv6 address carries.
func embeddedV4(b [16]byte) (netip.Addr, bool) {
	zero := func(bs []byte) bool {
		for _, x := range bs {
			if x != 0 {
				return false
			}
		}
		return true
	}
	v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	switch {
	case zero(b[:12]) && !zero(b[12:]):
		return v4, true
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(b[4:12]):
		return v4, true
	}
	return netip.Addr{}, false
}

// localAddr reports whether a is an address of one of this machine's
// interfaces (its public address too: a service bound to every address
// answers there as on loopback).
func localAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: treat it as the host's
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

var internalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space (carrier NAT)
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
}
