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
	// only, when set, is all the next flush writes, written from where
	// it lies rather than copied into out (a shared segment, mostly).
	only []byte
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

// add adds lines of this stream's own to what the next flush writes.
func (b *streamBody) add(lines []byte) {
	if !b.gzip {
		b.put(lines)
		return
	}
	b.put(deflateBlocks(lines, false))
	b.crc = crc32.Update(b.crc, crc32.IEEETable, lines)
	b.size += uint32(len(lines))
}

// sharedLines is lines that many streams send, with what a gzip stream
// needs of them made once: their deflate blocks and their CRC-32.
type sharedLines struct {
	plain, z []byte
	crc      uint32
}

// addShared adds lines made for every stream: a gzip stream takes their
// blocks as they are and folds their CRC into its own, so that it never
// reads the lines themselves.
func (b *streamBody) addShared(l sharedLines) {
	if !b.gzip {
		b.put(l.plain)
		return
	}
	b.put(l.z)
	b.crc = crc32Combine(b.crc, l.crc, len(l.plain))
	b.size += uint32(len(l.plain))
}

// put adds p to what the next flush writes. p is not copied while it is
// all the next flush writes, so it must not change until then.
func (b *streamBody) put(p []byte) {
	if len(b.out) == 0 && b.only == nil {
		b.only = p
		return
	}
	if b.only != nil {
		b.out = append(b.out, b.only...)
		b.only = nil
	}
	b.out = append(b.out, p...)
}

// flush writes what was added, in one write.
func (b *streamBody) flush() error {
	p := b.out
	if b.only != nil {
		p = b.only
	}
	if len(p) == 0 {
		return nil
	}
	err := b.write(p)
	b.out, b.only = b.out[:0], nil
	return err
}

// end writes the stream's last line and ends the gzip member.
func (b *streamBody) end(line []byte) {
	b.add(line)
	if b.gzip {
		b.put([]byte{0x03, 0x00}) // an empty final block
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

// crc32Combine is the IEEE CRC-32 of A followed by B, from A's, B's and
// B's length n, in time logarithmic in n: A's CRC is carried over n
// zero bytes (multiplied by x^(8n) modulo the polynomial) and B's added.
// It is zlib's crc32_combine; the standard library has no such function.
func crc32Combine(crcA, crcB uint32, n int) uint32 {
	if n <= 0 {
		return crcA
	}
	return crcMulModP(crcX8n(uint64(n)), crcA) ^ crcB
}

// crcPoly is the IEEE polynomial, bit-reversed as hash/crc32 uses it;
// crcOne is the polynomial 1 in that order.
const (
	crcPoly = 0xedb88320
	crcOne  = 1 << 31
)

// crcX2k[k] is x^(2^k) modulo the polynomial.
var crcX2k = func() (t [32]uint32) {
	p := uint32(crcOne >> 1) // x^1
	for k := range t {
		t[k] = p
		p = crcMulModP(p, p)
	}
	return t
}()

// crcMulModP is a(x)·b(x) modulo the polynomial.
func crcMulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(crcOne); m != 0 && a != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			a ^= m
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// crcX8n is x^(8n) modulo the polynomial: what n zero bytes multiply a
// CRC by.
func crcX8n(n uint64) uint32 {
	p := uint32(crcOne)
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = crcMulModP(crcX2k[k%32], p)
		}
	}
	return p
}
