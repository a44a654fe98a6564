package replay

import (
	"os"
	"testing"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

func TestScratch(t *testing.T) {
	pol := fsm.Policy(os.Getenv("POL"))
	if pol == "" {
		t.Skip()
	}
	nodes, _ := trace.ReadNodesFile("../../../shared/traces/openb/openb_node_list_gpu_node.csv")
	tasks, _ := trace.ReadTasksFile("../../../shared/traces/openb/openb_pod_list_default.csv")
	r, err := Protocol(nodes, tasks, pol, 42)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: tasks %d placed %d at100 %.2f at130 %.2f in %v", pol, r.Tasks, r.Placed, r.At100, r.At130, r.Elapsed)
}
