//go:build !unix

package main

import "github.com/hashicorp/go-hclog"

// raiseFileLimit does nothing where there is no RLIMIT_NOFILE.
func raiseFileLimit(hclog.Logger) {}
