package egress

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseNet(t *testing.T) {
	tests := []struct {
		values []string
		mode   string
		rules  []string
		err    string
	}{
		{nil, ModeHost, nil, ""},
		{[]string{"host"}, ModeHost, nil, ""},
		{[]string{"none"}, ModeNone, nil, ""},
		{[]string{"allow=api.anthropic.com"}, ModeAllow, []string{"api.anthropic.com:443"}, ""},
		{[]string{"allow=API.Example.COM.:8443,*.example.org", "allow=127.0.0.1:8080"}, ModeAllow,
			[]string{"api.example.com:8443", "*.example.org:443", "127.0.0.1:8080"}, ""},
		{[]string{"allow=[::1]:80,[2001:db8::1],2001:db8::2"}, ModeAllow, []string{"[::1]:80", "[2001:db8::1]:443", "[2001:db8::2]:443"}, ""},
		{[]string{"allow="}, "", nil, "no host given"},
		{[]string{"allow=a.com:0"}, "", nil, "want 1-65535"},
		{[]string{"allow=a.com:https"}, "", nil, "want 1-65535"},
		{[]string{"allow=*"}, "", nil, "not a host name"},
		{[]string{"allow=*.com"}, "", nil, "two labels"},
		{[]string{"allow=a/b.com"}, "", nil, "character"},
		{[]string{"allow=[::1"}, "", nil, "missing ]"},
		{[]string{"host", "allow=a.com"}, "", nil, "give one network mode"},
		{[]string{"bridge"}, "", nil, "want host, none or allow="},
	}
	for _, tt := range tests {
		t.Run(tt.mode+tt.err, func(t *testing.T) {
			mode, rules, err := ParseNet(tt.values)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.mode, mode)
			var got []string
			for _, r := range rules {
				got = append(got, r.String())
			}
			assert.Equal(t, tt.rules, got)
		})
	}
}

func TestPolicyMatch(t *testing.T) {
	rules, err := ParseAllow("api.example.com,*.cdn.example.com:8443,10.0.0.5:80,[::1]:8080")
	require.NoError(t, err)
	p := Policy{Allow: rules}
	tests := []struct {
		host     string
		port     int
		ok       bool
		wildcard bool
	}{
		{"api.example.com", 443, true, false},
		{"API.EXAMPLE.COM.", 443, true, false},
		{"api.example.com", 80, false, false}, // no port: 443 only
		{"example.com", 443, false, false},
		{"evil-api.example.com", 443, false, false},
		{"a.cdn.example.com", 8443, true, true},
		{"a.b.cdn.example.com", 8443, true, true},
		{"cdn.example.com", 8443, false, false}, // a wildcard is below its domain only
		{"xcdn.example.com", 8443, false, false},
		{"a.cdn.example.com", 443, false, false},
		{"10.0.0.5", 80, true, false},
		{"::ffff:10.0.0.5", 80, true, false},
		{"[::1]", 8080, true, false},
		{"::1", 8080, true, false},
		{"127.0.0.1", 8080, false, false},
	}
	for _, tt := range tests {
		r, ok := p.Match(tt.host, tt.port)
		assert.Equal(t, tt.ok, ok, "%s:%d", tt.host, tt.port)
		assert.Equal(t, tt.wildcard, r.Wildcard, "%s:%d", tt.host, tt.port)
	}
}

func TestInternal(t *testing.T) {
	for a, want := range map[string]bool{
		"127.0.0.1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "0.0.0.0": true, "::1": true, "fe80::1": true, "fd00::1": true, "::ffff:127.0.0.1": true,
		"224.0.0.1": true, "1.1.1.1": false, "160.79.104.10": false, "2606:4700::1111": false,
		"::127.0.0.1": true, "64:ff9b::7f00:1": true, "64:ff9b::a00:1": true, "64:ff9b::101:101": false,
	} {
		assert.Equal(t, want, Internal(netip.MustParseAddr(a)), a)
	}
	// Every address of this machine's interfaces, its public one too.
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			a, _ := netip.AddrFromSlice(n.IP)
			assert.True(t, Internal(a.Unmap()), "%s is this machine's", a)
			if a.Unmap().Is4() {
				assert.True(t, Internal(netip.MustParseAddr("::ffff:"+a.Unmap().String())), "%s mapped", a)
			}
		}
	}
}

func TestParseResolve(t *testing.T) {
	m, err := ParseResolve([]string{"API.test=127.0.0.1", "v6.test=[::1]"})
	require.NoError(t, err)
	assert.Equal(t, map[string]netip.Addr{"api.test": netip.MustParseAddr("127.0.0.1"), "v6.test": netip.MustParseAddr("::1")}, m)
	_, err = ParseResolve([]string{"api.test"})
	assert.ErrorContains(t, err, "want NAME=IP")
	_, err = ParseResolve([]string{"api.test=nowhere"})
	assert.Error(t, err)
}
