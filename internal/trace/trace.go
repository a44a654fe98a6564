// Package trace reads public cluster traces from their CSV files: the
// node and pod lists of the Alibaba GPU cluster trace 2023 ("openb") and
// the job list of the Microsoft Philly trace. Columns are found by header
// name, so their order does not matter; a malformed row is an error that
// names its line.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Node is one host of the openb node list.
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	GPUs      int
	// Model is the GPU model ("" for a CPU-only host).
	Model string
}

// Task is one row of an openb pod list.
type Task struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	// NumGPU is how many GPUs the task takes; GPUMilli is the share of
	// each, in thousandths. GPUMilli < 1000 only occurs with NumGPU = 1:
	// a share of one GPU.
	NumGPU   int
	GPUMilli int64
	// GPUSpec restricts the GPU model: "" for any, or models joined by "|".
	GPUSpec string
	QoS     string
	Phase   string
	// Times are seconds from the start of the trace; absent ones are 0.
	Creation  int64
	Deletion  int64
	Scheduled int64
}

// GPUDemand is the GPU capacity the task asks for, in thousandths of a GPU.
func (t Task) GPUDemand() int64 { return int64(t.NumGPU) * t.GPUMilli }

// PhillyJob is one job of the Philly trace.
type PhillyJob struct {
	Submitted time.Time
	Duration  time.Duration
	NumGPUs   int
	// GPUTime is GPU-seconds used, as the trace reports it.
	GPUTime float64
	Cluster string
}

// ErrFormat is wrapped by every error about the content of a file.
var ErrFormat = errors.New("trace format")

// table is a CSV file with a header row, read row by row.
type table struct {
	r    *csv.Reader
	cols map[string]int
	row  []string
	line int
}

func newTable(r io.Reader, need ...string) (*table, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	t := &table{r: cr, cols: map[string]int{}}
	for i, name := range head {
		t.cols[strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))] = i
	}
	for _, name := range need {
		if _, ok := t.cols[name]; !ok {
			return nil, fmt.Errorf("%w: no column %q", ErrFormat, name)
		}
	}
	return t, nil
}

// next reads the next row; it returns false at the end of the file.
func (t *table) next() (bool, error) {
	row, err := t.r.Read()
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	t.row = row
	t.line, _ = t.r.FieldPos(0)
	return true, nil
}

// str returns a column of the current row ("" if the file lacks it).
func (t *table) str(name string) string {
	i, ok := t.cols[name]
	if !ok || i >= len(t.row) {
		return ""
	}
	return strings.TrimSpace(t.row[i])
}

func (t *table) errf(format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrFormat, t.line, fmt.Sprintf(format, args...))
}

// int reads a non-negative integer column; empty reads as 0.
func (t *table) int(name string) (int64, error) {
	s := t.str(name)
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, t.errf("%s %q is not a non-negative integer", name, s)
	}
	return v, nil
}

// float reads a non-negative finite number column; empty reads as 0.
func (t *table) float(name string) (float64, error) {
	s := t.str(name)
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v != v || v > 1e300 {
		return 0, t.errf("%s %q is not a non-negative number", name, s)
	}
	return v, nil
}

// ReadNodes reads an openb node list (columns sn, cpu_milli, memory_mib,
// gpu, model).
func ReadNodes(r io.Reader) ([]Node, error) {
	t, err := newTable(r, "sn", "cpu_milli", "memory_mib", "gpu", "model")
	if err != nil {
		return nil, err
	}
	var out []Node
	for {
		ok, err := t.next()
		if err != nil || !ok {
			return out, err
		}
		n := Node{Name: t.str("sn"), Model: t.str("model")}
		if n.Name == "" {
			return nil, t.errf("empty sn")
		}
		var gpus int64
		if n.CPUMilli, err = t.int("cpu_milli"); err != nil {
			return nil, err
		}
		if n.MemoryMiB, err = t.int("memory_mib"); err != nil {
			return nil, err
		}
		if gpus, err = t.int("gpu"); err != nil {
			return nil, err
		}
		if gpus > 1<<16 {
			return nil, t.errf("gpu %d is implausible", gpus)
		}
		n.GPUs = int(gpus)
		if n.GPUs > 0 && n.Model == "" {
			return nil, t.errf("host %s has GPUs but no model", n.Name)
		}
		out = append(out, n)
	}
}

// ReadTasks reads an openb pod list (columns name, cpu_milli, memory_mib,
// num_gpu, gpu_milli; gpu_spec, qos, pod_phase and the times are optional).
func ReadTasks(r io.Reader) ([]Task, error) {
	t, err := newTable(r, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	var out []Task
	for {
		ok, err := t.next()
		if err != nil || !ok {
			return out, err
		}
		k := Task{Name: t.str("name"), GPUSpec: t.str("gpu_spec"), QoS: t.str("qos"), Phase: t.str("pod_phase")}
		var n int64
		for _, f := range []struct {
			col string
			dst *int64
		}{
			{"cpu_milli", &k.CPUMilli}, {"memory_mib", &k.MemoryMiB}, {"num_gpu", &n}, {"gpu_milli", &k.GPUMilli},
			{"creation_time", &k.Creation}, {"deletion_time", &k.Deletion}, {"scheduled_time", &k.Scheduled},
		} {
			if *f.dst, err = t.int(f.col); err != nil {
				return nil, err
			}
		}
		switch {
		case n > 1<<16:
			return nil, t.errf("num_gpu %d is implausible", n)
		case k.GPUMilli > 1000:
			return nil, t.errf("gpu_milli %d is more than one GPU", k.GPUMilli)
		case n > 1 && k.GPUMilli != 1000:
			return nil, t.errf("%d GPUs of %d milli each: only a single GPU may be shared", n, k.GPUMilli)
		case n == 0 && k.GPUMilli != 0:
			return nil, t.errf("gpu_milli %d without GPUs", k.GPUMilli)
		}
		k.NumGPU = int(n)
		out = append(out, k)
	}
}

// phillyTime is the layout of Philly submission times.
const phillyTime = "2006-01-02 15:04:05"

// ReadPhilly reads the Philly job list (columns timestamp, duration,
// num_gpus, gpu_time, cluster). Times are read as UTC.
func ReadPhilly(r io.Reader) ([]PhillyJob, error) {
	t, err := newTable(r, "timestamp", "duration", "num_gpus", "gpu_time", "cluster")
	if err != nil {
		return nil, err
	}
	var out []PhillyJob
	for {
		ok, err := t.next()
		if err != nil || !ok {
			return out, err
		}
		j := PhillyJob{Cluster: t.str("cluster")}
		if j.Submitted, err = time.Parse(phillyTime, t.str("timestamp")); err != nil {
			return nil, t.errf("timestamp %q: %v", t.str("timestamp"), err)
		}
		d, err := t.float("duration")
		if err != nil {
			return nil, err
		}
		if d > float64(1<<62)/float64(time.Second) {
			return nil, t.errf("duration %v is implausible", d)
		}
		j.Duration = time.Duration(d * float64(time.Second))
		n, err := t.int("num_gpus")
		if err != nil {
			return nil, err
		}
		if n > 1<<16 {
			return nil, t.errf("num_gpus %d is implausible", n)
		}
		j.NumGPUs = int(n)
		if j.GPUTime, err = t.float("gpu_time"); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
}

// ReadNodesFile reads an openb node list from a file.
func ReadNodesFile(path string) ([]Node, error) { return readFile(path, ReadNodes) }

// ReadTasksFile reads an openb pod list from a file.
func ReadTasksFile(path string) ([]Task, error) { return readFile(path, ReadTasks) }

// ReadPhillyFile reads the Philly job list from a file.
func ReadPhillyFile(path string) ([]PhillyJob, error) { return readFile(path, ReadPhilly) }

func readFile[T any](path string, read func(io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
