package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `dmsc bench -spawn 3` starts three agent processes, drives them, reports
// the servers' CPU per write and every request's latency, saves their
// profiles, and leaves nothing running or on disk behind; with -spawn-tls
// the same over TLS.
func TestBenchSpawn(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"plain", nil},
		{"tls", []string{"-spawn-tls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t, 3*time.Minute)
			tmp := t.TempDir()
			profiles := filepath.Join(t.TempDir(), "profiles")
			// 8 clients on 8 hosts of 8 GPUs hold 8 and ask for up to 4 more
			// each: some host always has 4 free, so no request is refused
			// for capacity.
			args := append([]string{"bench", "-spawn", "3", "-quick", "-duration", "4s", "-gpus-per-host", "8", "-mix", "alloc=3,alloc4=1,read=1,renew=1",
				"-profile", profiles, "-json"}, tc.args...)
			cmd := exec.CommandContext(ctx, binary, args...)
			// The agents' data directories go under TMPDIR: this test's own.
			cmd.Env = append(agentEnv(), "TMPDIR="+tmp)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("dmsc %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
			}
			var res struct {
				Nodes                int                            `json:"nodes"`
				Failed               int64                          `json:"failed"`
				WritesPerSec         float64                        `json:"writes_per_sec"`
				CPUMSPerWrite        float64                        `json:"cpu_ms_per_write"`
				ServersCPUMSPerWrite float64                        `json:"servers_cpu_ms_per_write"`
				ByRequest            map[string]struct{ Ops int64 } `json:"by_request"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if res.Nodes != 3 || res.Failed != 0 || res.WritesPerSec <= 0 {
				t.Errorf("result %+v", res)
			}
			// The servers do most of the work of a write.
			if res.ServersCPUMSPerWrite <= 0 || res.CPUMSPerWrite <= res.ServersCPUMSPerWrite {
				t.Errorf("CPU per write %.3f ms, servers %.3f ms", res.CPUMSPerWrite, res.ServersCPUMSPerWrite)
			}
			for _, r := range []string{"allocate", "release", "read", "renew"} {
				if res.ByRequest[r].Ops == 0 {
					t.Errorf("no %s request: %+v", r, res.ByRequest)
				}
			}
			for _, s := range []string{"bench-s1", "bench-s2", "bench-s3"} {
				for _, kind := range []string{"cpu", "block", "mutex"} {
					if st, err := os.Stat(filepath.Join(profiles, s+"-"+kind+".pprof")); err != nil || st.Size() == 0 {
						t.Errorf("profile %s-%s: %v", s, kind, err)
					}
				}
			}
			// The agents are gone with their data.
			left, err := filepath.Glob(filepath.Join(tmp, "dmsc-bench-*"))
			if err != nil || len(left) != 0 {
				t.Errorf("left behind: %v %v", left, err)
			}
			if b, err := exec.Command("pgrep", "-f", "dmsc-bench-").Output(); err == nil && len(bytes.TrimSpace(b)) > 0 {
				t.Errorf("agents still running: %s", b)
			}
		})
	}
}
