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
	b := []byte(s)
	num := func(i, n int) (int, bool) {
		if i+n > len(b) {
			return 0, false
		}
		v := 0
		for _, c := range b[i : i+n] {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	at := func(i int, c byte) bool { return i < len(b) && b[i] == c }
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 2)
	day, ok3 := num(8, 2)
	if !ok1 || !ok2 || !ok3 || !at(4, '-') || !at(7, '-') || !(at(10, 'T') || at(10, ' ')) {
		return time.Time{}, false
	}
	hour, ok1 := num(11, 2)
	minute, ok2 := num(14, 2)
	sec, ok3 := num(17, 2)
	if !ok1 || !ok2 || !ok3 || !at(13, ':') || !at(16, ':') {
		return time.Time{}, false
	}
	i := 19
	nsec := 0
	if at(i, '.') || at(i, ',') {
		i++
		digits := 0
		scale := 100000000
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if digits < 9 {
				nsec += int(b[i]-'0') * scale
				scale /= 10
			}
			digits++
			i++
		}
		if digits == 0 {
			return time.Time{}, false
		}
		nsec -= nsec % 1000 // microsecond precision, like Python datetimes
	}
	offset := 0
	switch {
	case at(i, 'Z') && i+1 == len(b):
	case at(i, '+') || at(i, '-'):
		oh, ok1 := num(i+1, 2)
		j := i + 3
		if at(j, ':') {
			j++
		}
		om, ok2 := num(j, 2)
		if !ok1 || !ok2 || j+2 != len(b) || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = oh*3600 + om*60
		if b[i] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, false
	}
	if month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	loc := time.UTC // the zone of nearly every event: no Location to allocate
	if offset != 0 {
		loc = time.FixedZone("", offset)
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc)
	if t.Day() != day { // e.g. February 30th
		return time.Time{}, false
	}
	return t.UTC(), true
}

// parseUTCSecond parses the form nearly every event carries,
// YYYY-MM-DDTHH:MM:SSZ, as parseTime does, without building a time from
// a calendar date; done is false for any other form.
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
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false, true
	}
	secs := daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+sec)
	return time.Unix(secs, 0).UTC(), true, true
}

// digits reads the n decimal digits of s at i.
func digits(s string, i, n int) (int, bool) {
	v := 0
	for _, c := range []byte(s[i : i+n]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// daysIn is the number of days of month in year (proleptic Gregorian).
func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil counts the days from 1970-01-01 to year-month-day
// (proleptic Gregorian; Howard Hinnant's days_from_civil).
func daysFromCivil(year, month, day int) int64 {
	y := int64(year)
	if month <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	m := int64(month)
	if m > 2 {
		m -= 3
	} else {
		m += 9
	}
	doy := (153*m+2)/5 + int64(day) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
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
