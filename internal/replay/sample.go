package replay

import (
	_ "embed"
	"os"
	"path/filepath"
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

// Openb is the openb input of a replay.
type Openb struct {
	Nodes []trace.Node
	Tasks []trace.Task
	// Source names the pod list: its path, or the built-in sample.
	Source string
	// Missing, when the built-in sample stands in, is the trace file
	// that was not found.
	Missing string
}

// LoadOpenb reads the openb node and pod lists. Empty paths mean the
// default files under TracesDir; with sample set, the built-in sample
// (SampleOpenb) stands in when a default file is missing.
func LoadOpenb(nodesPath, podsPath string, sample bool) (Openb, error) {
	if nodesPath == "" {
		nodesPath = filepath.Join(TracesDir(), "openb", "openb_node_list_gpu_node.csv")
	}
	if podsPath == "" {
		podsPath = filepath.Join(TracesDir(), "openb", "openb_pod_list_default.csv")
	}
	if sample {
		for _, p := range []string{podsPath, nodesPath} {
			if _, err := os.Stat(p); err != nil {
				nodes, tasks, err := SampleOpenb()
				return Openb{Nodes: nodes, Tasks: tasks, Source: "built-in openb_pod_list_default.csv (first 1000 pods)", Missing: p}, err
			}
		}
	}
	nodes, err := trace.ReadNodesFile(nodesPath)
	if err != nil {
		return Openb{}, err
	}
	tasks, err := trace.ReadTasksFile(podsPath)
	if err != nil {
		return Openb{}, err
	}
	return Openb{Nodes: nodes, Tasks: tasks, Source: podsPath}, nil
}

// TracesDir is ../shared/traces next to the module root found upward
// from the working directory, or ../shared/traces when there is none.
func TracesDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join("..", "shared", "traces")
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(d), "shared", "traces")
		}
		if filepath.Dir(d) == d {
			return filepath.Join("..", "shared", "traces")
		}
	}
}
