package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/fsm"
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
		{"-address", "127.0.0.1:1"},
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
		}
		Means []struct {
			Policy string
			At130  float64
		}
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &out); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, ui.OutputWriter.String())
	}
	if len(out.Runs) != 1 || out.Runs[0].Seed != 42 || out.Runs[0].Placed == 0 || len(out.Runs[0].Curve) != 131 ||
		out.Runs[0].At130 < 50 || out.Runs[0].At130 > 100 || out.Runs[0].At100 > out.Runs[0].At130 {
		t.Fatalf("implausible runs %+v", out.Runs)
	}
	if len(out.Means) != 1 || out.Means[0].At130 != out.Runs[0].At130 {
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
	philly := filepath.Join(tracesDir(), "philly.csv")
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
