package protocol

// seqSet holds the seqs seen so far in O(1) per operation: a clean history
// is the range 1..contiguous and needs no map at all; only broken
// histories (gaps, duplicates) put entries in extra.
type seqSet struct {
	contiguous int
	extra      map[int]struct{}
}

func (s *seqSet) has(n int) bool {
	if n >= 1 && n <= s.contiguous {
		return true
	}
	_, ok := s.extra[n]
	return ok
}

func (s *seqSet) add(n int) {
	if s.has(n) {
		return
	}
	if n != s.contiguous+1 {
		if s.extra == nil {
			s.extra = map[int]struct{}{}
		}
		s.extra[n] = struct{}{}
		return
	}
	s.contiguous++
	for {
		if _, ok := s.extra[s.contiguous+1]; !ok {
			return
		}
		delete(s.extra, s.contiguous+1)
		s.contiguous++
	}
}
