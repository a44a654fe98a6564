package main

import (
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// startDevAgent runs the built `dmsc agent -dev` with extra arguments
// until the test ends, waits until it is ready, and returns its HTTP
// address and its log.
func startDevAgent(t *testing.T, extra ...string) (string, *logWatcher) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if runtime.GOOS == "windows" {
		t.Skip("unix only")
	}
	bin := buildDMSC(t)
	cmd := exec.Command(bin, append([]string{"agent", "-dev", "-http-addr", "127.0.0.1:0"}, extra...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := watchLog(stderr)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	addr, ok := logs.find(regexp.MustCompile(`HTTP API listening: address=(\S+)`), deadline, exited)
	if !ok {
		t.Fatalf("no HTTP address logged; output:\n%s", logs.text())
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := hc.Get("http://" + addr + "/v1/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready at the deadline:\n%s", logs.text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return addr, logs
}

// runTour runs the README's 60-second tour against the agent at
// DMSC_ADDR, with whatever token DMSC_TOKEN holds.
func runTour(t *testing.T) {
	t.Helper()
	var a wire.Allocation
	jsonOut(t, &a, "alloc", "-type", "GPU", "-memory-gb", "16")
	if a.Status != client.Active || len(a.Devices) != 1 {
		t.Fatalf("tour allocation %+v", a)
	}
	for _, tc := range []cliCase{
		{args: []string{"stats"}, out: []string{"GPU", "BestFit", "100%"}},
		{args: []string{"recommend", "-type", "GPU"}, out: []string{"keep_policy"}},
		{args: []string{"alloc", "-type", "GPU", "-memory-gb", "100"}, code: exitCapacity, errOut: []string{"Refused: no device fits the request."}},
		{args: []string{"release", a.ID}, out: []string{"is released"}},
	} {
		tc.check(t)
	}
	// dmsc run, a process of its own, as a user runs it.
	out, err := exec.Command(buildDMSC(t), "run", "-type", "GPU", "-count", "2", "--",
		"sh", "-c", `echo "GPUs $CUDA_VISIBLE_DEVICES on $DMSC_HOSTS"`).Output()
	if want := "GPUs dev-t4-gpu0,dev-t4-gpu1 on dev-t4\n"; err != nil || string(out) != want {
		t.Fatalf("dmsc run: %q, %v; want %q", out, err, want)
	}
}

// TestTour runs the README's tour against `dmsc agent -dev` as written,
// with ACLs off.
func TestTour(t *testing.T) {
	addr, _ := startDevAgent(t)
	t.Setenv(client.AddressEnv, "http://"+addr)
	t.Setenv(client.TokenEnv, "")
	t.Setenv(client.NamespaceEnv, "")
	runTour(t)
}

// TestTourACL runs the tour against `dmsc agent -dev -acl-enabled`: the
// agent says how to bootstrap, nothing works without a token, and the
// tour works with the management token in DMSC_TOKEN.
func TestTourACL(t *testing.T) {
	addr, logs := startDevAgent(t, "-acl-enabled")
	if !strings.Contains(logs.text(), "dmsc acl bootstrap") {
		t.Fatalf("no bootstrap hint in the log:\n%s", logs.text())
	}
	t.Setenv(client.AddressEnv, "http://"+addr)
	t.Setenv(client.TokenEnv, "")
	t.Setenv(client.NamespaceEnv, "")
	cliCase{args: []string{"alloc", "-type", "GPU", "-memory-gb", "16"}, code: exitDenied, errOut: []string{"permission_denied"}}.check(t)
	var boot wire.ACLToken
	jsonOut(t, &boot, "acl", "bootstrap")
	t.Setenv(client.TokenEnv, boot.SecretID)
	runTour(t)
}
