package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/cli"
)

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-local", "3", "-address", "127.0.0.1:1"},
		{"-mix", "alloc=0"},
		{"-mix", "write=3"},
		{"-local", "9"},
		{"-clients", "0"},
		{"-local-storage", "tape"},
		{"-retries", "-1"},
		{"-event-streams", "2", "-event-raw"},
		{"extra"},
	} {
		ui := cli.NewMockUi()
		c := &benchCommand{apiCommand: apiCommand{ui: ui}, progress: &bytes.Buffer{}}
		if code := c.Run(args); code != exitUsage {
			t.Errorf("dmsc bench %s: exit %d, want %d; stderr %q", strings.Join(args, " "), code, exitUsage, ui.ErrorWriter.String())
		}
	}
}

// TestBenchLocal runs the command end to end against a one-server cluster
// it starts itself, and reads its JSON.
func TestBenchLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	ui := cli.NewMockUi()
	var progress bytes.Buffer
	c := &benchCommand{apiCommand: apiCommand{ui: ui}, progress: &progress}
	code := c.Run([]string{"-local", "1", "-quick", "-duration", "1200ms", "-clients", "3", "-hosts", "3", "-json"})
	if code != exitOK {
		t.Fatalf("exit %d; stderr %s", code, ui.ErrorWriter.String())
	}
	var res struct {
		OpsPerSec float64 `json:"ops_per_sec"`
		LatencyMS struct {
			P50, P95, P99, Max float64
		} `json:"latency_ms"`
		Errors    map[string]int64 `json:"errors"`
		Clients   int              `json:"clients"`
		DurationS float64          `json:"duration_s"`
		Nodes     int              `json:"nodes"`
		Devices   int              `json:"devices"`
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, ui.OutputWriter.String())
	}
	if res.OpsPerSec <= 0 || res.Clients != 3 || res.Nodes != 1 || res.Devices != 12 || res.DurationS < 1.2 ||
		res.LatencyMS.P50 <= 0 || res.LatencyMS.P99 < res.LatencyMS.P50 || res.LatencyMS.Max < res.LatencyMS.P99 {
		t.Errorf("implausible result %+v", res)
	}
	if res.Errors == nil || len(res.Errors) != 0 {
		t.Errorf("errors %v, want an empty map", res.Errors)
	}
	if !strings.Contains(progress.String(), "ops/s") {
		t.Errorf("no progress line in %q", progress.String())
	}
}

// TestBenchEventStreams runs the bench with event streams of both kinds:
// decoding through the SDK, and raw readers that count bytes.
func TestBenchEventStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	for _, extra := range [][]string{nil, {"-event-raw"}} {
		ui := cli.NewMockUi()
		c := &benchCommand{apiCommand: apiCommand{ui: ui}, progress: &bytes.Buffer{}}
		args := append([]string{"-local", "1", "-quick", "-duration", "1s", "-clients", "2", "-hosts", "2", "-mix", "alloc=100", "-event-streams", "3", "-json"}, extra...)
		if code := c.Run(args); code != exitOK {
			t.Fatalf("dmsc bench %s: exit %d; stderr %s", strings.Join(args, " "), code, ui.ErrorWriter.String())
		}
		var res struct {
			EventStreams       int   `json:"event_streams"`
			EventsReceived     int64 `json:"events_received"`
			EventBytesReceived int64 `json:"event_bytes_received"`
		}
		if err := json.Unmarshal(ui.OutputWriter.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if res.EventStreams != 3 || (extra == nil) != (res.EventsReceived > 0) || (extra != nil) != (res.EventBytesReceived > 0) {
			t.Errorf("dmsc bench %s: %+v", strings.Join(args, " "), res)
		}
	}
}
