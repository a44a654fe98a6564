//go:build !unix

package main

import (
	"context"

	"github.com/hashicorp/go-hclog"
)

// heapProfilesOnSignal does nothing where there is no SIGUSR1.
func heapProfilesOnSignal(context.Context, string, hclog.Logger) {}
