package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/replay"
)

func TestReplayUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-protocol", "magic"},
		{"-trace", "borg"},
		{"-trace", "philly"}, // philly needs the timeline protocol
		{"-policy", "Fastest"},
		{"-seeds", "51-42"},
		{"-seeds", "x"},
		{"-protocol", "timeline", "-plot", "x.png"},
		{"-address", "127.0.0.1:1"}, // every policy and seed: one run only
		{"-address", "127.0.0.1:1", "-policy", "BestFit,FirstFit", "-seeds", "42"},
		{"-address", "127.0.0.1:1", "-local", "3", "-policy", "BestFit", "-seeds", "42"},
		{"-protocol", "timeline", "-address", "127.0.0.1:1", "-policy", "BestFit,FirstFit"},
		{"-local", "9"},
		{"-protocol", "timeline", "-tenants"}, // tenants: the philly trace only
		{"-protocol", "timeline", "-trace", "philly", "-tenants", "-half-life", "0s"},
		{"-local", "1", "-local-storage", "tape"},
		{"-protocol", "timeline", "-vary", "gpushare=60"}, // -vary: the fgd protocol only
		{"-vary", "gpushare"},
		{"-quick", "-vary", "gpuspec=20"}, // the default list binds no task to a model
		{"extra"},
	} {
		ui := cli.NewMockUi()
		c := &replayCommand{apiCommand: apiCommand{ui: ui}, progress: &bytes.Buffer{}}
		if code := c.Run(args); code != exitUsage {
			t.Errorf("dmsc replay %s: exit %d, want %d; stderr %q", strings.Join(args, " "), code, exitUsage, ui.ErrorWriter.String())
		}
	}
}

func TestParseSeeds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int64
	}{
		{"42", []int64{42}},
		{"42-45", []int64{42, 43, 44, 45}},
		{"1,5-6", []int64{1, 5, 6}},
	} {
		got, err := parseSeeds(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseSeeds(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParsePolicies(t *testing.T) {
	got, err := parsePolicies("bestfit, FragmentationAware")
	if err != nil || !reflect.DeepEqual(got, []fsm.Policy{fsm.BestFit, fsm.FragmentationAware}) {
		t.Fatalf("parsePolicies = %v, %v", got, err)
	}
	if all, _ := parsePolicies("all"); len(all) != len(fsm.Policies) {
		t.Fatalf("all = %v", all)
	}
}

// TestReplayVary replays a pod list derived from the sample and says so.
func TestReplayVary(t *testing.T) {
	out, _ := replayJSON(t, "-protocol", "fgd", "-quick", "-hosts", "20", "-limit", "300", "-policy", "BestFit", "-vary", "gpushare=60", "-vary-seed", "3")
	if src, _ := out["source"].(string); !strings.HasSuffix(src, ", gpushare=60 (seed 3)") {
		t.Fatalf("source %q does not name the variation", src)
	}
}

// TestReplayQuickJSON runs a small fgd replay end to end and reads its
// JSON and plot.
func TestReplayQuickJSON(t *testing.T) {
	ui := cli.NewMockUi()
	c := &replayCommand{apiCommand: apiCommand{ui: ui}, progress: &bytes.Buffer{}}
	plot := filepath.Join(t.TempDir(), "curve.svg")
	code := c.Run([]string{"-protocol", "fgd", "-quick", "-hosts", "20", "-limit", "300", "-policy", "BestFit", "-json", "-plot", plot})
	if code != exitOK {
		t.Fatalf("exit %d; stderr %s", code, ui.ErrorWriter.String())
	}
	var out struct {
		Runs []struct {
			Policy        string
			Seed          int64
			At100, At130  float64
			Tasks, Placed int
			Curve         []float64
			Leftover      *struct{ Small, Starved, Open float64 }
		}
		Means []struct {
			Policy   string
			At130    float64
			Leftover *struct{ Open float64 }
		}
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &out); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, ui.OutputWriter.String())
	}
	if len(out.Runs) != 1 || out.Runs[0].Seed != 42 || out.Runs[0].Placed == 0 || len(out.Runs[0].Curve) != 131 ||
		out.Runs[0].At130 < 50 || out.Runs[0].At130 > 100 || out.Runs[0].At100 > out.Runs[0].At130 {
		t.Fatalf("implausible runs %+v", out.Runs)
	}
	if l := out.Runs[0].Leftover; l == nil || math.Abs(l.Small+l.Starved+l.Open-(100-out.Runs[0].At130)) > 1e-6 {
		t.Fatalf("leftover %+v: not what the run left free", l)
	}
	if len(out.Means) != 1 || out.Means[0].At130 != out.Runs[0].At130 || out.Means[0].Leftover == nil || out.Means[0].Leftover.Open != out.Runs[0].Leftover.Open {
		t.Fatalf("means %+v", out.Means)
	}
	// The saved JSON draws the same plot again.
	saved := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(saved, ui.OutputWriter.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(t.TempDir(), "curve.png")
	ui2 := cli.NewMockUi()
	c2 := &replayCommand{apiCommand: apiCommand{ui: ui2}, progress: &bytes.Buffer{}}
	if code := c2.Run([]string{"-replot", saved, "-plot", png}); code != exitOK {
		t.Fatalf("replot: exit %d; stderr %s", code, ui2.ErrorWriter.String())
	}
	for _, f := range []string{plot, png} {
		if st, err := os.Stat(f); err != nil || st.Size() < 1000 {
			t.Fatalf("plot %s: %v", f, err)
		}
	}
}

func TestReplayTimelinePhilly(t *testing.T) {
	philly := filepath.Join(replay.TracesDir(), "philly.csv")
	ui := cli.NewMockUi()
	c := &replayCommand{apiCommand: apiCommand{ui: ui}, progress: &bytes.Buffer{}}
	code := c.Run([]string{"-protocol", "timeline", "-trace", "philly", "-philly", philly, "-hosts", "4", "-limit", "200", "-policy", "BestFit", "-timeout", "10m"})
	if code == exitOK {
		if !strings.Contains(ui.OutputWriter.String(), "WAIT P95") {
			t.Fatalf("no table:\n%s", ui.OutputWriter.String())
		}
		return
	}
	if strings.Contains(ui.ErrorWriter.String(), "no such file") {
		t.Skipf("no Philly trace at %s", philly)
	}
	t.Fatalf("exit %d; stderr %s", code, ui.ErrorWriter.String())
}

func TestReplayTimelinePhillyTenants(t *testing.T) {
	philly := filepath.Join(replay.TracesDir(), "philly.csv")
	if _, err := os.Stat(philly); err != nil {
		t.Skipf("no Philly trace: %v", err)
	}
	ui := cli.NewMockUi()
	c := &replayCommand{apiCommand: apiCommand{ui: ui}, progress: &bytes.Buffer{}}
	code := c.Run([]string{"-protocol", "timeline", "-trace", "philly", "-philly", philly, "-hosts", "4", "-limit", "300",
		"-policy", "BestFit", "-timeout", "10m", "-tenants", "-half-life", "1h"})
	if code != exitOK {
		t.Fatalf("exit %d; stderr %s", code, ui.ErrorWriter.String())
	}
	out := ui.OutputWriter.String()
	for _, want := range []string{"fair share", "FIFO", "NAMESPACE", "ENTITLED%", "P95 FAIR/FIFO", "vc-", "worst p95 ratio"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
}

// replayJSON runs dmsc replay with -json and returns its output with the
// wall-clock figures removed, and its progress output.
func replayJSON(t *testing.T, args ...string) (map[string]any, string) {
	t.Helper()
	ui := cli.NewMockUi()
	var progress bytes.Buffer
	c := &replayCommand{apiCommand: apiCommand{ui: ui}, progress: &progress}
	if code := c.Run(append(args, "-json")); code != exitOK {
		t.Fatalf("dmsc replay %s: exit %d; stderr %s", strings.Join(args, " "), code, ui.ErrorWriter.String())
	}
	var out map[string]any
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &out); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, ui.OutputWriter.String())
	}
	for _, key := range []string{"runs", "results"} {
		runs, _ := out[key].([]any)
		for _, r := range runs {
			delete(r.(map[string]any), "elapsed_s")
			delete(r.(map[string]any), "elapsed_ns")
			delete(r.(map[string]any), "max_lag_ns")
		}
	}
	return out, progress.String()
}

// TestReplayLocalMatchesInProcess runs the fgd and timeline protocols on a
// small openb sample with -local 1 and requires the JSON of the in-process
// replay, wall-clock figures aside.
func TestReplayLocalMatchesInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft nodes")
	}
	for _, args := range [][]string{
		{"-protocol", "fgd", "-quick", "-hosts", "20", "-limit", "300", "-policy", "BestFit,FragmentationAware"},
		{"-protocol", "timeline", "-quick", "-hosts", "10", "-limit", "300", "-policy", "BestFit", "-speedup", "1e7", "-timeout", "0"},
	} {
		want, _ := replayJSON(t, args...)
		got, progress := replayJSON(t, append(args, "-local", "1")...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("dmsc replay %s: -local 1 answers\n%v\nin process\n%v", strings.Join(args, " "), got, want)
		}
		if !strings.Contains(progress, "fresh cluster of 1 servers") {
			t.Errorf("progress %q does not say where the replay runs", progress)
		}
	}
}

// TestReplayAddress replays one run against a running cluster: the same
// figures as in process, nothing of the run left on the cluster after it,
// and a warning when the cluster is used again.
func TestReplayAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{Servers: 1, InMemory: true, HTTP: api.NodeHandler(api.Options{Role: "server"})})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := lc.Close(cctx); err != nil {
			t.Error(err)
		}
	}()
	args := []string{"-protocol", "fgd", "-quick", "-hosts", "20", "-limit", "300", "-policy", "FragmentationAware"}
	want, _ := replayJSON(t, args...)
	got, progress := replayJSON(t, append(args, "-address", strings.Join(lc.Addresses(), ","))...)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("-address answers\n%v\nin process\n%v", got, want)
	}
	if strings.Contains(progress, "warning") {
		t.Errorf("a warning on a fresh cluster: %q", progress)
	}
	cl, err := client.New(client.Config{Addresses: lc.Addresses()})
	if err != nil {
		t.Fatal(err)
	}
	q := &client.QueryOptions{Consistent: true}
	hosts, _, err := cl.Hosts(ctx, q)
	if err != nil || len(hosts) != 0 {
		t.Errorf("after the run: %d hosts (%v), want none", len(hosts), err)
	}
	live, _, err := cl.Allocations(ctx, &client.AllocationFilter{Statuses: []client.AllocStatus{client.Active, client.Pending}}, q)
	if err != nil || len(live.Allocations) != 0 {
		t.Errorf("after the run: live allocations %v (%v), want none", live, err)
	}
	pols, _, err := cl.Policies(ctx, q)
	if err != nil || len(pols.Pools) != 0 {
		t.Errorf("after the run: pool policies %v (%v), want none", pols, err)
	}
	// A second run on the same cluster is warned about.
	_, progress = replayJSON(t, append(args, "-address", strings.Join(lc.Addresses(), ","))...)
	if !strings.Contains(progress, "warning: the cluster has served allocation requests before") {
		t.Errorf("no warning on a used cluster: %q", progress)
	}
}
