package replay

import (
	_ "embed"
	"strings"

	"github.com/dmsc/dmsc/internal/trace"
)

// The openb GPU host list and the first 1,000 rows of the default pod
// list (Alibaba GPU cluster trace 2023, Apache-2.0), for a quick replay
// where the full traces are not at hand.
var (
	//go:embed testdata/openb_node_list_gpu_node.csv
	sampleNodes string
	//go:embed testdata/openb_pod_list_default_first1000.csv
	samplePods string
)

// SampleOpenb returns the embedded openb hosts and first 1,000 tasks.
func SampleOpenb() ([]trace.Node, []trace.Task, error) {
	nodes, err := trace.ReadNodes(strings.NewReader(sampleNodes))
	if err != nil {
		return nil, nil, err
	}
	tasks, err := trace.ReadTasks(strings.NewReader(samplePods))
	if err != nil {
		return nil, nil, err
	}
	return nodes, tasks, nil
}
