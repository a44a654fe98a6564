package api

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"strings"
	"sync"
)

// streamBody is an event stream's body as it goes out: plain lines, or,
// when the reader accepts gzip, one gzip member made of deflate blocks
// that each start afresh (they refer to nothing sent before them), so
// that a segment read whole is compressed once and the same bytes go to
// every stream that sends it. The member's trailer goes out when the
// stream ends (end).
type streamBody struct {
	write func([]byte) error
	gzip  bool
	crc   uint32
	size  uint32
	out   []byte // what the next flush writes
}

// gzipHeader opens a gzip member: deflate, no name, no time, unknown OS.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}

// startEventBody answers 200 with an event stream's body.
func (s *Server) startEventBody(w http.ResponseWriter, r *http.Request) *streamBody {
	b := &streamBody{gzip: acceptsGzip(r.Header.Get("Accept-Encoding"))}
	w.Header().Add("Vary", "Accept-Encoding")
	if b.gzip {
		w.Header().Set("Content-Encoding", "gzip")
		b.out = append(b.out, gzipHeader...)
	}
	b.write = s.startStream(w, "application/x-ndjson")
	return b
}

// add adds lines to what the next flush writes; z, when not nil, is
// their deflate blocks made already.
func (b *streamBody) add(lines, z []byte) {
	if !b.gzip {
		b.out = append(b.out, lines...)
		return
	}
	if z == nil {
		z = deflateBlocks(lines, false)
	}
	b.out = append(b.out, z...)
	b.crc = crc32.Update(b.crc, crc32.IEEETable, lines)
	b.size += uint32(len(lines))
}

// flush writes what was added, in one write.
func (b *streamBody) flush() error {
	if len(b.out) == 0 {
		return nil
	}
	err := b.write(b.out)
	b.out = b.out[:0]
	return err
}

// end writes the stream's last line and ends the gzip member.
func (b *streamBody) end(line []byte) {
	b.add(line, nil)
	if b.gzip {
		b.out = append(b.out, 0x03, 0x00) // an empty final block
		b.out = binary.LittleEndian.AppendUint32(b.out, b.crc)
		b.out = binary.LittleEndian.AppendUint32(b.out, b.size)
	}
	_ = b.flush()
}

// deflaters are compressors for deflateBlocks, fast ones for what one
// stream alone sends and thorough ones for the segments every stream
// sends (each holds some hundreds of KiB: one per stream would be too
// many).
var deflaters = [2]sync.Pool{
	{New: func() any { w, _ := flate.NewWriter(nil, flate.BestSpeed); return w }},
	{New: func() any { w, _ := flate.NewWriter(nil, flate.DefaultCompression); return w }},
}

// deflateBlocks is p as deflate blocks that refer to nothing before them,
// ended by a sync flush: not final, so that more can follow. shared says
// the blocks go to many streams, so that compressing them well pays.
func deflateBlocks(p []byte, shared bool) []byte {
	var buf bytes.Buffer
	pool := &deflaters[0]
	if shared {
		pool = &deflaters[1]
	}
	w := pool.Get().(*flate.Writer)
	w.Reset(&buf)
	_, _ = w.Write(p)
	_ = w.Flush()
	w.Reset(nil)
	pool.Put(w)
	return buf.Bytes()
}

// acceptsGzip says whether an Accept-Encoding header accepts gzip.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
