package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dmscclient "github.com/dmsc/dmsc/client"
)

// built is the binary the tests run, built once.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildDMSC builds the binary into a temporary directory, once.
func buildDMSC(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "dmsc-test-bin-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "dmsc")
		if runtime.GOOS == "windows" {
			built.bin += ".exe"
		}
		built.out, built.err = exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.bin
}

// logWatcher collects a process's log lines and finds values in them.
type logWatcher struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{}
}

func watchLog(r io.Reader) *logWatcher {
	w := &logWatcher{more: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.mu.Unlock()
			select {
			case w.more <- struct{}{}:
			default:
			}
		}
	}()
	return w
}

func (w *logWatcher) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// find waits until re matches a line and returns its first group.
func (w *logWatcher) find(re *regexp.Regexp, deadline time.Time, exited <-chan struct{}) (string, bool) {
	for {
		if m := re.FindStringSubmatch(w.text()); m != nil {
			return m[1], true
		}
		select {
		case <-w.more:
		case <-exited:
			time.Sleep(50 * time.Millisecond) // let the last lines arrive
			if m := re.FindStringSubmatch(w.text()); m != nil {
				return m[1], true
			}
			return "", false
		case <-time.After(time.Until(deadline)):
			return "", false
		}
	}
}

func TestAgentDevSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if runtime.GOOS == "windows" {
		t.Skip("sends SIGTERM")
	}
	bin := buildDMSC(t)
	cmd := exec.Command(bin, "agent", "-dev", "-http-addr", "127.0.0.1:0")
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
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	deadline := time.Now().Add(60 * time.Second)
	addr, ok := logs.find(regexp.MustCompile(`HTTP API listening: address=(\S+)`), deadline, exited)
	if !ok {
		t.Fatalf("no HTTP address logged; output:\n%s", logs.text())
	}
	dataDir, _ := logs.find(regexp.MustCompile(`agent started: .*data_dir=(\S+)`), deadline, exited)

	client := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) (int, map[string]any) {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if code, body := get("/v1/health"); code != http.StatusOK || body["status"] != "ok" {
		t.Fatalf("/v1/health = %d %v", code, body)
	}
	for {
		code, body := get("/v1/ready")
		if code == http.StatusOK && body["ready"] == true {
			break
		}
		select {
		case <-exited:
			t.Fatalf("agent exited before it was ready: %v\n%s", waitErr, logs.text())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("/v1/ready = %d %v at the deadline; output:\n%s", code, body, logs.text())
		}
	}
	if !strings.Contains(logs.text(), "dmsc alloc -type GPU -memory-gb 16") {
		t.Fatalf("no hint for the user in the log:\n%s", logs.text())
	}

	// dmsc monitor's stream carries what the agent logs from then on.
	checkMonitor(t, "http://"+addr, func() {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}, "SIGHUP: nothing to reload")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("agent still running 30s after SIGTERM:\n%s", logs.text())
	}
	if waitErr != nil {
		t.Fatalf("agent exit: %v\n%s", waitErr, logs.text())
	}
	if !strings.Contains(logs.text(), "agent stopped") {
		t.Fatalf("no clean stop logged:\n%s", logs.text())
	}
	if dataDir == "" {
		t.Fatalf("data_dir not logged:\n%s", logs.text())
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("dev data directory %s still exists after exit (stat: %v)", dataDir, err)
	}
}

func TestAgentRefusesBadConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildDMSC(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "agent", "-server").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "needs -data-dir") {
		t.Fatalf("dmsc agent -server: err %v, output:\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "dmsc v"+version) {
		t.Fatalf("dmsc version: %v %s", err, out)
	}
}

// checkMonitor follows the log of the agent at addr, does what, and waits
// for a line that contains want.
func checkMonitor(t *testing.T, addr string, what func(), want string) {
	t.Helper()
	cl, err := dmscclient.New(dmscclient.Config{Addresses: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lines, err := cl.Monitor(ctx, "debug", false)
	if err != nil {
		t.Fatal(err)
	}
	what()
	var seen []string
	for l := range lines {
		if strings.Contains(l, want) {
			return
		}
		seen = append(seen, l)
	}
	t.Fatalf("monitor: no line with %q in 10 s; lines:\n%s", want, strings.Join(seen, "\n"))
}
