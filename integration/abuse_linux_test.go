//go:build linux

package integration

// The denial-of-service attacks of issue 12 against a real agent: slow
// request bodies and idle connections from one client address while
// another client allocates, and concurrent garbage snapshot uploads while
// the agent's memory is watched.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// raiseNoFile lifts this process's open-files limit to its hard limit and
// skips the test when that is below need.
func raiseNoFile(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < need {
		t.Skipf("open-files limit %d is below the %d the test needs", lim.Cur, need)
	}
}

// attacker holds connections from one address: each of its goroutines
// keeps one connection open (reconnecting about a second after it is
// refused or closed) and, for a slow body, sends a request whose body
// comes one byte every 5 s.
type attacker struct {
	from, to  string
	accepted  atomic.Int64 // connections held past their first second
	refused   atomic.Int64 // connections answered 429 or closed at once
	open, max atomic.Int64
	wg        sync.WaitGroup
}

func (a *attacker) run(ctx context.Context, n int, slow bool) {
	for range n {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for ctx.Err() == nil {
				a.once(ctx, slow)
				// Back in 0.5 to 1.5 s: goroutines that retried in step
				// would send the server bursts of thousands of
				// connections each second, a flood this test is not.
				select {
				case <-ctx.Done():
				case <-time.After(500*time.Millisecond + rand.N(time.Second)):
				}
			}
		}()
	}
}

func (a *attacker) once(ctx context.Context, slow bool) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(a.from)}, Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", a.to)
	if err != nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	if n := a.open.Add(1); n > a.max.Load() {
		a.max.Store(n) // a high-water mark; a lost race only lowers it a little
	}
	defer a.open.Add(-1)
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		// Whatever the server says (a 429, a 408 for the body), the
		// connection ends when it closes.
		_, _ = io.Copy(io.Discard, c)
		close(closed)
	}()
	if slow {
		_, _ = fmt.Fprintf(c, "POST /v1/allocations HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", a.to)
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	counted := false
	for {
		select {
		case <-closed:
			if !counted {
				a.refused.Add(1)
			}
			return
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
			if !counted && time.Since(start) >= time.Second {
				counted = true
				a.accepted.Add(1)
			}
			continue
		case <-tick.C:
			if slow {
				_, _ = c.Write([]byte(" "))
			}
		}
	}
}

// TestAbuseSlowAndIdleConnections: 600 slow-body and 2,000 idle
// connections from 127.0.0.2 while a client on 127.0.0.1 allocates and
// releases: that client's p99 stays under 100 ms, with no error.
func TestAbuseSlowAndIdleConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an agent under load")
	}
	if raceEnabled {
		t.Skip("a latency target: .ci/run runs it on its own without -race")
	}
	raiseNoFile(t, 8000)
	probe, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", "127.0.0.1:1")
	if err != nil && strings.Contains(err.Error(), "assign requested address") {
		t.Skip("127.0.0.2 is not usable here")
	} else if err == nil {
		probe.Close()
	}
	c := StartCluster(t, Options{Servers: 1, Hosts: 1})
	s := c.Servers[0]

	ctx, cancel := context.WithCancel(t.Context())
	atk := &attacker{from: "127.0.0.2", to: s.HTTPAddr}
	defer func() { cancel(); atk.wg.Wait() }()
	atk.run(ctx, 600, true)
	atk.run(ctx, 2000, false)
	time.Sleep(3 * time.Second) // the attack is in place

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:         (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).DialContext,
		MaxIdleConnsPerHost: 4,
	}}
	post := func(path, body string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(t.Context(), "POST", s.URL(path), strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, b, err
	}
	var (
		lat    []time.Duration
		errs   []string
		allocs int
	)
	end := time.Now().Add(12 * time.Second)
	for time.Now().Before(end) {
		start := time.Now()
		code, body, err := post("/v1/allocations", `{"claims":[{"type":"GPU","count":1}]}`)
		lat = append(lat, time.Since(start))
		if err != nil || code != http.StatusOK {
			errs = append(errs, fmt.Sprintf("allocate: %d %v %s", code, err, body))
			continue
		}
		var a wire.Allocation
		if err := json.Unmarshal(body, &a); err != nil {
			errs = append(errs, fmt.Sprintf("allocate answer %s: %v", body, err))
			continue
		}
		allocs++
		start = time.Now()
		code, body, err = post("/v1/allocations/"+a.ID+"/release", "")
		lat = append(lat, time.Since(start))
		if err != nil || code != http.StatusOK {
			errs = append(errs, fmt.Sprintf("release: %d %v %s", code, err, body))
		}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	p50, p99 := pct(0.50), pct(0.99)
	t.Logf("attacker 127.0.0.2: 600 slow-body + 2000 idle goroutines; connections held > 1 s: %d, refused/closed at once: %d, most open at once: %d",
		atk.accepted.Load(), atk.refused.Load(), atk.max.Load())
	t.Logf("client 127.0.0.1: %d requests (%d allocate+release pairs) in 12 s: p50 %v, p99 %v, max %v, errors %d",
		len(lat), allocs, p50, p99, lat[len(lat)-1], len(errs))
	if len(errs) > 0 {
		t.Errorf("%d errors, first: %s", len(errs), errs[0])
	}
	if p99 >= 100*time.Millisecond {
		t.Errorf("p99 %v, want < 100ms", p99)
	}
	if len(lat) < 100 {
		t.Errorf("only %d requests in 12 s", len(lat))
	}
	// The agent still answers ready to the second client.
	res, err := client.Get(s.URL("/v1/ready"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("ready: %d", res.StatusCode)
	}
}

// garbage is n pseudo-random bytes after a '{', so that an upload looks
// like a snapshot long enough to be spooled in full.
type garbage struct {
	n, sent int64
	x       uint64
}

func (g *garbage) Read(p []byte) (int, error) {
	if g.sent >= g.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), g.n-g.sent)]
	for i := range p {
		if g.sent == 0 && i == 0 {
			p[i] = '{'
			continue
		}
		g.x ^= g.x << 13
		g.x ^= g.x >> 7
		g.x ^= g.x << 17
		p[i] = byte(g.x)
	}
	g.sent += int64(len(p))
	return len(p), nil
}

// rssKB reads a process's resident set from /proc.
func rssKB(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// TestAbuseGarbageSnapshotUploads: four concurrent 500 MB garbage uploads
// are each refused 4xx, the agent's memory grows by less than 64 MB per
// upload, nothing is restored and the agent stays ready.
func TestAbuseGarbageSnapshotUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 2 GB")
	}
	c := StartCluster(t, Options{Servers: 1, Hosts: -1})
	s := c.Servers[0]
	s.mu.Lock()
	pid := s.cmd.Process.Pid
	s.mu.Unlock()
	base, err := rssKB(pid)
	if err != nil {
		t.Fatal(err)
	}

	var peak atomic.Int64
	peak.Store(base)
	sampleCtx, stopSampling := context.WithCancel(t.Context())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if kb, err := rssKB(pid); err == nil && kb > peak.Load() {
				peak.Store(kb)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	const size = 500 << 20
	codes := make([]int, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 4 {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), "PUT", s.URL("/v1/snapshot"), &garbage{n: size, x: uint64(i) + 88172645463325252})
			if err != nil {
				errs[i] = err
				return
			}
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/octet-stream")
			res, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			codes[i] = res.StatusCode
			if res.StatusCode < 400 || res.StatusCode >= 500 {
				errs[i] = fmt.Errorf("status %d: %s", res.StatusCode, bytes.TrimSpace(b))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	stopSampling()
	<-sampled
	growth := peak.Load() - base
	t.Logf("4 x 500 MB garbage uploads in %v: statuses %v; agent RSS %d MB before, peak %d MB, growth %d MB (limit %d MB)",
		took.Round(time.Millisecond), codes, base>>10, peak.Load()>>10, growth>>10, 4*64)
	for i, err := range errs {
		if err != nil {
			t.Errorf("upload %d: %v", i, err)
		}
	}
	if growth >= 4*64<<10 {
		t.Errorf("RSS grew by %d MB, want < %d MB", growth>>10, 4*64)
	}
	var st wire.NodeStatus
	if err := c.Get(t.Context(), s, "/v1/ready", &st); err != nil {
		t.Fatalf("not ready after the uploads: %v", err)
	}
	if log, err := os.ReadFile(s.LogPath); err != nil || bytes.Contains(log, []byte("state restored from a snapshot")) {
		t.Errorf("the agent restored a snapshot (log read: %v)", err)
	}
	left, _ := os.ReadDir(s.DataDir)
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "dmsc-snapshot-upload-") {
			t.Errorf("upload file left: %s", e.Name())
		}
	}
}
