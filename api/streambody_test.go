package api

import (
	"hash/crc32"
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
