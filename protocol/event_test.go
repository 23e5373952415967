package protocol

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every field of Event that lines carry is a row of eventFields, in the
// order of Event and at its own bit: a field added to Event and not to
// the table would be neither read nor written.
func TestEventFieldsDeclareEveryField(t *testing.T) {
	typ := reflect.TypeOf(Event{})
	if !assert.Equal(t, typ.NumField(), len(eventFields), "Event and eventFields differ") {
		return
	}
	for i := range eventFields {
		f := &eventFields[i]
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		assert.Equal(t, name, f.name, "row %d", i)
		assert.Equal(t, fieldMask(1)<<i, f.bit, "row %d (%s)", i, f.name)
		assert.Equal(t, f.bit, fieldBit([]byte(`"`+f.name+`"`)), f.name)
		assert.Equal(t, !strings.Contains(typ.Field(i).Tag.Get("json"), "omitempty"), f.required, "%s: required fields are the ones Event always marshals", f.name)
	}
}
