package api

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The monitor streams the agent's log at the level asked for, whatever
// the agent's own level.
func TestMonitor(t *testing.T) {
	logs := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "dmsc", Level: hclog.Error, Output: &strings.Builder{}})
	e := newEnv(t, Options{Logs: logs})
	srv := newStreamServer(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/agent/monitor?log_level=debug", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("monitor answered %d", resp.StatusCode)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	log := logs.Named("cluster")
	log.Trace("too fine", "n", 1)
	log.Debug("leader elected", "id", "s1")
	select {
	case l := <-lines:
		if !strings.Contains(l, "[DEBUG] dmsc.cluster: leader elected: id=s1") {
			t.Fatalf("line %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no line in 5 s")
	}
	cancel()

	e.do("GET", "/v1/agent/monitor?log_level=loud", "").apiErr(400, "bad_request")
	none := newEnv(t, Options{})
	none.do("GET", "/v1/agent/monitor", "").apiErr(404, "not_found")
}
