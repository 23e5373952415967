package store

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNames(t *testing.T) {
	tests := []struct {
		in    string
		valid bool
		host  string
	}{
		{"c1", true, "c1"},
		{"rate-limiter_2", true, "rate-limiter_2"},
		{"", false, ""},
		{strings.Repeat("a", 64), true, strings.Repeat("a", 64)},
		{strings.Repeat("a", 65), false, strings.Repeat("a", 65)},
		{"a.b", false, "a_b"},
		{"host.example.org", false, "host_example_org"},
		{"a b*>", false, "a_b__"},
		{"é", false, "__"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.valid, validName(tt.in))
			assert.Equal(t, tt.host, hostName(tt.in))
		})
	}
}
