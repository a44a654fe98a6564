package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tracesDir holds the shared copies of the public traces.
const tracesDir = "../../../shared/traces"

func TestReadNodes(t *testing.T) {
	in := "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,32000,131072,0,\n"
	got, err := ReadNodes(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{{"n0", 64000, 262144, 2, "P100"}, {"n1", 32000, 131072, 0, ""}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestReadTasksColumnsByName(t *testing.T) {
	in := "gpu_spec,name,num_gpu,gpu_milli,memory_mib,cpu_milli\nV100M16|V100M32,p0,1,460,12288,6000\n,p1,8,1000,0,88000\n"
	got, err := ReadTasks(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d tasks", len(got))
	}
	if g := got[0]; g.Name != "p0" || g.CPUMilli != 6000 || g.MemoryMiB != 12288 || g.NumGPU != 1 || g.GPUMilli != 460 || g.GPUSpec != "V100M16|V100M32" {
		t.Fatalf("task 0 = %+v", g)
	}
	if d := got[1].GPUDemand(); d != 8000 {
		t.Fatalf("GPU demand %d, want 8000", d)
	}
}

func TestReadRefusesBadRows(t *testing.T) {
	head := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
	for name, in := range map[string]string{
		"missing column":    "name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n",
		"negative cpu":      head + "p,-1,1,1,500,\n",
		"not a number":      head + "p,x,1,1,500,\n",
		"share over 1000":   head + "p,1,1,1,1500,\n",
		"shared multi-GPU":  head + "p,1,1,2,500,\n",
		"milli without GPU": head + "p,1,1,0,500,\n",
		"ragged row":        head + "p,1,1\n",
	} {
		if _, err := ReadTasks(strings.NewReader(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
	if _, err := ReadNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,4,\n")); !errors.Is(err, ErrFormat) {
		t.Errorf("GPUs without a model: err = %v, want ErrFormat", err)
	}
	if _, err := ReadTasks(strings.NewReader(head + "p,1,1,1,500,\np,x,1,1,500,\n")); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("error %v does not name line 3", err)
	}
}

func TestReadPhilly(t *testing.T) {
	in := "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,2,132.0,11cb48\n\n"
	got, err := ReadPhilly(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := PhillyJob{Submitted: time.Date(2017, 10, 9, 7, 1, 55, 0, time.UTC), Duration: 66 * time.Second, NumGPUs: 2, GPUTime: 132, Cluster: "11cb48"}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := ReadPhilly(strings.NewReader("timestamp,duration,num_gpus,gpu_time,cluster\nyesterday,1,1,1,c\n")); !errors.Is(err, ErrFormat) {
		t.Fatalf("bad timestamp: err = %v", err)
	}
}

// TestSharedTraces reads the real files and checks the counts their README
// gives.
func TestSharedTraces(t *testing.T) {
	dir := filepath.Join(tracesDir, "openb")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("shared traces not found at %s: %v", dir, err)
	}
	nodes, err := ReadNodesFile(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	if len(nodes) != 1213 || gpus != 6212 {
		t.Errorf("gpu node list: %d hosts, %d GPUs; want 1213, 6212", len(nodes), gpus)
	}
	all, err := ReadNodesFile(filepath.Join(dir, "openb_node_list_all_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1213+310 {
		t.Errorf("all node list: %d hosts, want 1523", len(all))
	}
	for _, name := range []string{"default", "gpushare40", "multigpu20", "gpuspec10", "cpu050"} {
		tasks, err := ReadTasksFile(filepath.Join(dir, "openb_pod_list_"+name+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		if name == "default" && len(tasks) != 8152 {
			t.Errorf("default pod list: %d tasks, want 8152", len(tasks))
		}
	}
	jobs, err := ReadPhillyFile(filepath.Join(tracesDir, "philly.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 82247 {
		t.Errorf("philly: %d jobs, want 82247", len(jobs))
	}
}
