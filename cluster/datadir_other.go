//go:build !unix

package cluster

import "os"

// Without flock the data directory is not locked here; bbolt's own lock
// (with its open timeout) still keeps a second agent out of the store.
func tryLock(*os.File) error { return nil }

func unlock(*os.File) error { return nil }
