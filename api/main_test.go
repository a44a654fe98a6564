package api

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A batch's workers outlive it by itemWorkerIdle, waiting for the
	// next; TestItemWorkersEnd shows that they end.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/dmsc/dmsc/api.(*itemWorkers).serve"))
}
