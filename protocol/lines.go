package protocol

import (
	"bufio"
	"errors"
	"io"
)

// forEachLine calls fn for every line of r, without its newline, in a
// bounded buffer whatever the size of the history. The last line is
// passed with complete=false when r does not end with a newline.
func forEachLine(r io.Reader, fn func(line []byte, complete bool)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, chunk...)
			continue
		case errors.Is(err, io.EOF):
			if long != nil {
				chunk = append(long, chunk...)
			}
			if len(chunk) > 0 {
				fn(chunk, false)
			}
			return nil
		case err != nil:
			return err
		}
		if long != nil {
			chunk = append(long, chunk...)
			long = nil
		}
		fn(chunk[:len(chunk)-1], true)
	}
}
