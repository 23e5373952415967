package protocol

import (
	"time"
)

// parseTime accepts the RFC 3339 profile of ISO-8601 that ACP writes:
// YYYY-MM-DD, 'T' or ' ', HH:MM:SS, an optional fraction ('.' or ','),
// and a zone that is 'Z' or ±HH:MM (±HHMM). A zone is mandatory because
// events are compared across machines.
func parseTime(s string) (time.Time, bool) {
	if t, ok, done := parseUTCSecond(s); done {
		return t, ok
	}
	return parseTimeGeneral(s)
}

// parseTimeGeneral is parseTime for every form.
func parseTimeGeneral(s string) (time.Time, bool) {
	at := func(i int, c byte) bool { return i < len(s) && s[i] == c }
	year, ok1 := digits(s, 0, 4)
	month, ok2 := digits(s, 5, 2)
	day, ok3 := digits(s, 8, 2)
	if !ok1 || !ok2 || !ok3 || !at(4, '-') || !at(7, '-') || !(at(10, 'T') || at(10, ' ')) {
		return time.Time{}, false
	}
	hour, ok1 := digits(s, 11, 2)
	minute, ok2 := digits(s, 14, 2)
	sec, ok3 := digits(s, 17, 2)
	if !ok1 || !ok2 || !ok3 || !at(13, ':') || !at(16, ':') {
		return time.Time{}, false
	}
	i := 19
	nsec := 0
	if at(i, '.') || at(i, ',') {
		i++
		n := 0
		scale := 100000000
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if n < 9 {
				nsec += int(s[i]-'0') * scale
				scale /= 10
			}
			n++
			i++
		}
		if n == 0 {
			return time.Time{}, false
		}
		nsec -= nsec % 1000 // microsecond precision, like Python datetimes
	}
	offset := 0
	switch {
	case at(i, 'Z') && i+1 == len(s):
	case at(i, '+') || at(i, '-'):
		oh, ok1 := digits(s, i+1, 2)
		j := i + 3
		if at(j, ':') {
			j++
		}
		om, ok2 := digits(s, j, 2)
		if !ok1 || !ok2 || j+2 != len(s) || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = oh*3600 + om*60
		if s[i] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, false
	}
	loc := time.UTC // the zone of nearly every event: no Location to allocate
	if offset != 0 {
		loc = time.FixedZone("", offset)
	}
	return civil(year, month, day, hour, minute, sec, nsec, loc)
}

// parseUTCSecond parses the form nearly every event carries,
// YYYY-MM-DDTHH:MM:SSZ, as parseTime does, with its fixed layout checked
// first; done is false for any other form.
func parseUTCSecond(s string) (t time.Time, ok, done bool) {
	if len(s) != 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[19] != 'Z' {
		return time.Time{}, false, false
	}
	year, ok1 := digits(s, 0, 4)
	month, ok2 := digits(s, 5, 2)
	day, ok3 := digits(s, 8, 2)
	hour, ok4 := digits(s, 11, 2)
	minute, ok5 := digits(s, 14, 2)
	sec, ok6 := digits(s, 17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return time.Time{}, false, false
	}
	t, ok = civil(year, month, day, hour, minute, sec, 0, time.UTC)
	return t, ok, true
}

// civil is the time of a calendar date and a clock in loc, in UTC; ok is
// false for one that does not exist (month 13, hour 24, February 30th),
// which time.Date would carry over into the next.
func civil(year, month, day, hour, minute, sec, nsec int, loc *time.Location) (time.Time, bool) {
	if month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc)
	// Every month has its 28 first days: only a later one is looked at
	// again (finding the day of a time costs as much as making it).
	if day > 28 && t.Day() != day {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// digits reads the n decimal digits of s at i; ok is false when s has
// fewer bytes there or one is not a digit.
func digits(s string, i, n int) (int, bool) {
	if i+n > len(s) {
		return 0, false
	}
	v := 0
	for _, c := range []byte(s[i : i+n]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// FormatTime renders t as ACP stamps its events and protocol.json: in
// UTC, to the second, with a "Z" suffix.
func FormatTime(t time.Time) string {
	return t.UTC().Truncate(time.Second).Format("2006-01-02T15:04:05Z")
}

// eventTime returns the time to stamp on a new event: now, but never
// earlier than the previous event (rounded up to the next whole second if
// the previous event carried a fraction).
func eventTime(now, prev time.Time, havePrev bool) string {
	now = now.UTC().Truncate(time.Second)
	if havePrev && now.Before(prev) {
		p := prev.UTC()
		if p.Truncate(time.Second).Equal(p) {
			return FormatTime(p)
		}
		return FormatTime(p.Truncate(time.Second).Add(time.Second))
	}
	return FormatTime(now)
}
