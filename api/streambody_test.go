package api

import (
	"bytes"
	"compress/gzip"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"
)

// A gzip stream folds each shared segment's CRC into its own; the result
// must be the CRC of everything it sent, whatever the lengths.
func TestCRC32Combine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lengths := []int{0, 1, 2, 3, 7, 8, 255, 256, 4096, 65537, 1 << 20}
	for _, na := range lengths {
		for _, nb := range lengths {
			a, b := make([]byte, na), make([]byte, nb)
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			want := crc32.ChecksumIEEE(append(append([]byte(nil), a...), b...))
			if got := crc32Combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), nb); got != want {
				t.Fatalf("lengths %d+%d: combined CRC %08x, want %08x", na, nb, got, want)
			}
		}
	}
}

// A stream's body is one gzip member whatever mix of shared segments and
// lines of its own goes into each write, and a write of one shared
// segment alone sends the shared bytes themselves.
func TestStreamBodyMixes(t *testing.T) {
	seg := func(s string) sharedLines {
		p := []byte(s)
		return sharedLines{plain: p, z: deflateBlocks(p, true), crc: crc32.ChecksumIEEE(p)}
	}
	a, b := seg("{\"index\":1}\n{\"index\":2}\n"), seg("{\"index\":3}\n")
	for _, gz := range []bool{true, false} {
		var writes [][]byte
		body := &streamBody{gzip: gz, write: func(p []byte) error {
			writes = append(writes, bytes.Clone(p))
			return nil
		}}
		if gz {
			body.out = append(body.out, gzipHeader...)
		}
		_ = body.flush()
		body.addShared(a) // alone: written from where it is
		var sent []byte
		body.write = func(p []byte) error {
			sent = p
			writes = append(writes, bytes.Clone(p))
			return nil
		}
		_ = body.flush()
		want := a.plain
		if gz {
			want = a.z
		}
		if &sent[0] != &want[0] {
			t.Fatalf("gzip %v: a shared segment alone was copied", gz)
		}
		body.addShared(a)
		body.add([]byte("{\"own\":1}\n"))
		body.addShared(b)
		_ = body.flush()
		body.add([]byte("{\"own\":2}\n"))
		body.addShared(b)
		body.end([]byte("{\"end\":1}\n"))

		all := bytes.Join(writes, nil)
		if gz {
			zr, err := gzip.NewReader(bytes.NewReader(all))
			if err != nil {
				t.Fatal(err)
			}
			if all, err = io.ReadAll(zr); err != nil { // checks the CRC and length
				t.Fatalf("gzip member: %v", err)
			}
		}
		wantAll := string(a.plain) + string(a.plain) + "{\"own\":1}\n" + string(b.plain) + "{\"own\":2}\n" + string(b.plain) + "{\"end\":1}\n"
		if string(all) != wantAll {
			t.Fatalf("gzip %v: body\n%s\nwant\n%s", gz, all, wantAll)
		}
	}
}
