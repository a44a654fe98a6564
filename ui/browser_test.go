package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// The browser tests drive Debian's headless Chromium with chromedp against
// a cluster in this process. Without a browser they skip, unless
// DMSC_REQUIRE_BROWSER=1 (as in CI), when they fail. With
// DMSC_UI_SCREENSHOTS=DIR they write their screenshots there (docs/ui
// holds the README's); else into the test's temporary directory.

// browserPath finds Chromium.
func browserPath(t testing.TB) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("DMSC_REQUIRE_BROWSER") == "1" {
		t.Fatal("no chromium on PATH, and DMSC_REQUIRE_BROWSER=1")
	}
	t.Skip("no chromium on PATH")
	return ""
}

// uiCluster is a cluster in process serving the API and the UI.
type uiCluster struct {
	t    testing.TB
	lc   *cluster.LocalCluster
	base string // http://127.0.0.1:port
	// token is sent with the test's own API calls.
	token string
}

func startCluster(t testing.TB, servers int, opts api.Options) *uiCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster and a browser")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts.Version, opts.Role = "test", "server"
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers:   servers,
		Dir:       t.TempDir(),
		InMemory:  true,
		Configure: func(c *cluster.Config) { c.TickInterval = 100 * time.Millisecond },
		HTTP:      api.NodeHandler(opts),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		if err := lc.Close(sctx); err != nil {
			t.Error(err)
		}
	})
	if _, err := lc.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return &uiCluster{t: t, lc: lc, base: lc.Addresses()[0]}
}

// apply writes commands through the first node.
func (c *uiCluster) apply(cmds ...fsm.Command) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cmd := range cmds {
		res, err := c.lc.Node("s1").Apply(ctx, cmd)
		if err == nil {
			err = res.Err
		}
		if err != nil {
			c.t.Fatalf("%T: %v", cmd, err)
		}
	}
}

// call is one HTTP API call; it decodes the answer into out.
func (c *uiCluster) call(method, path string, body any, want int, out any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	if c.token != "" {
		req.Header.Set(wire.HeaderToken, c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

func gpus(host string, n int) *fsm.RegisterHost {
	c := &fsm.RegisterHost{Host: fsm.HostSpec{ID: host, Labels: map[string]string{"rack": "r1"}}}
	for i := range n {
		c.Devices = append(c.Devices, fsm.DeviceSpec{ID: fmt.Sprintf("%s-g%d", host, i), Type: fsm.GPU, Name: "A100-80G",
			Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 80, ComputeUnits: 108}}})
	}
	return c
}

// browser is a headless Chromium tab that records what goes wrong on the
// page: console errors, uncaught exceptions, failed requests and answers
// of 400 or more.
type browser struct {
	t   testing.TB
	ctx context.Context
	// allowDenied lets 401 and 403 answers pass (the ACL test asks for
	// them on purpose).
	allowDenied bool

	mu       sync.Mutex
	problems []string
}

func newBrowser(t testing.TB, width, height int) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browserPath(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx}
	t.Cleanup(func() { cancel(); acancel() })
	// The first call starts the browser, and must have no deadline.
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.problem("console error: " + strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.problem(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError && !(b.denied() && ev.Entry.Source == log.EntrySourceNetwork) {
				b.problem(fmt.Sprintf("log error (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		case *network.EventLoadingFailed:
			if !ev.Canceled {
				b.problem(fmt.Sprintf("request failed: %s (%s)", ev.ErrorText, ev.Type))
			}
		case *network.EventResponseReceived:
			s := ev.Response.Status
			if s >= 400 && !(b.denied() && (s == 401 || s == 403)) {
				b.problem(fmt.Sprintf("answer %d for %s", s, ev.Response.URL))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	b.run(chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, log.Enable, cdp.Empty{})
		return err
	}))
	return b
}

func (b *browser) problem(p string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, p)
}

func (b *browser) denied() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.allowDenied
}

func (b *browser) setDenied(v bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.allowDenied = v
}

// check fails the test on anything the page got wrong so far.
func (b *browser) check(where string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("%s: %s", where, p)
	}
	b.problems = nil
}

// run runs actions with a deadline.
func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression (a promise is awaited).
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// js runs a JavaScript statement.
func (b *browser) js(expr string) { eval[any](b, "void ("+expr+")") }

// waitJS polls a JavaScript expression until it is true, for at most d.
func (b *browser) waitJS(expr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(b.ctx, d+time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+expr+")", chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(d)))
	return err
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf("document.querySelector(%q).textContent", sel))
}

// screenshot saves what the window shows as name.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("DMSC_UI_SCREENSHOTS")
	if dir == "" {
		dir = b.t.TempDir()
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// eventually polls cond for 5 s; it fails the test with what cond last
// saw.
func eventually(t *testing.T, what string, cond func() (bool, any)) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %+v after 5 s", what, saw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUIPages loads every page in a real browser, with no console error
// and no failed request; sees an allocation made through the API appear
// without a reload within 2 s; drains a device from the UI and sees the
// API report it; changes a policy from the UI; and finds the why-not on a
// refusal's page. It also loads the devices page on a phone-sized screen.
func TestUIPages(t *testing.T) {
	c := startCluster(t, 3, api.Options{WaitGrace: time.Second})
	c.apply(gpus("h1", 8), gpus("h2", 8), gpus("h3", 4))
	c.apply(&fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 4}}}})
	// A refusal for capacity, kept in the history with its why-not.
	var refused wire.Allocation
	c.call("POST", "/v1/allocations", wire.AllocateRequest{Request: wire.Request{Claims: []wire.Claim{{Type: wire.GPU, Count: 12}}}}, http.StatusConflict, nil)
	var hist wire.AllocationList
	c.call("GET", "/v1/history?status=failed&consistent", nil, http.StatusOK, &hist)
	if len(hist.Allocations) != 1 {
		t.Fatalf("history of failed requests: %+v", hist)
	}
	refused = hist.Allocations[0]

	b := newBrowser(t, 1280, 860)
	b.run(chromedp.Navigate(c.base + "/"))
	pages := []struct {
		hash, ready, name string
	}{
		{"#/overview", `document.querySelector('#results .cards') && document.querySelectorAll('#results tbody tr').length >= 3`, "overview"},
		{"#/devices", `document.querySelectorAll('.hostrow').length === 3`, "devices"},
		{"#/allocations", `document.querySelector('#results table')`, "allocations"},
		{"#/policies", `document.querySelector('select[data-policy="type:GPU"]')`, "policies"},
		{"#/stats", `document.querySelector('#charts svg polyline, #charts svg circle') && document.querySelector('#results table')`, "stats"},
	}
	for _, p := range pages {
		b.js(`location.hash = '` + p.hash + `'`)
		if err := b.waitJS(p.ready, 10*time.Second); err != nil {
			t.Fatalf("page %s never got ready (%s): %v", p.hash, p.ready, err)
		}
		if err := b.waitJS(`document.getElementById('live').textContent === 'live'`, 10*time.Second); err != nil {
			t.Fatalf("page %s: the event stream is not live: %v", p.hash, err)
		}
		b.check(p.hash)
		b.screenshot(p.name)
	}
	if s := b.text("#results"); !strings.Contains(s, "Utilisation") {
		t.Errorf("statistics page: %q", s)
	}
	// The charts follow the statistics as they change.
	for i := range 4 {
		time.Sleep(1100 * time.Millisecond)
		var a wire.Allocation
		c.call("POST", "/v1/allocations", wire.AllocateRequest{Request: wire.Request{Claims: []wire.Claim{{Type: wire.GPU, Count: 1 + i}}}}, http.StatusOK, &a)
	}
	if err := b.waitJS(`ui.series.length >= 4 && document.querySelectorAll('#charts polyline').length === 3`, 5*time.Second); err != nil {
		t.Fatalf("charts over time: %v", err)
	}
	b.screenshot("stats")

	// Live: an allocation made through the API shows without a reload.
	b.js(`location.hash = '#/allocations'`)
	if err := b.waitJS(`document.querySelector('#results table')`, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b.js(`window.notReloaded = true`)
	var a wire.Allocation
	c.call("POST", "/v1/allocations", wire.AllocateRequest{Request: wire.Request{Claims: []wire.Claim{{Type: wire.GPU, Count: 2}}}}, http.StatusOK, &a)
	start := time.Now()
	if err := b.waitJS(fmt.Sprintf(`document.getElementById('results').textContent.includes(%q)`, a.ID[:8]), 2*time.Second); err != nil {
		t.Fatalf("allocation %s not shown within 2 s: %v", a.ID, err)
	}
	t.Logf("allocation shown %v after the API answered", time.Since(start).Round(time.Millisecond))
	if !eval[bool](b, `window.notReloaded === true`) {
		t.Fatal("the page reloaded")
	}

	// Drain a device from the UI; the API reports it.
	b.js(`location.hash = '#/devices'`)
	if err := b.waitJS(`document.querySelector('[data-device="h3-g0"]')`, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Each click in one script: the page may re-render between two
	// protocol commands, and a node found by one is gone for the next.
	b.js(`document.querySelector('[data-device="h3-g0"]').click()`)
	if err := b.waitJS(`document.querySelector('[data-action="drain-device"]')`, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b.js(`document.querySelector('[data-action="drain-device"]').click()`)
	eventually(t, "device h3-g0 draining after Drain in the UI", func() (bool, any) {
		var d wire.Device
		c.call("GET", "/v1/devices/h3-g0", nil, http.StatusOK, &d)
		return d.Status == wire.Draining, d.Status
	})
	if err := b.waitJS(`document.querySelector('[data-device="h3-g0"]').classList.contains('draining') && document.getElementById('device-status').textContent.includes('draining')`, 5*time.Second); err != nil {
		t.Fatalf("the UI does not show the drained device: %v", err)
	}
	b.screenshot("devices-drained")

	// Change a type's policy from the UI; the API reports it.
	b.js(`location.hash = '#/policies'`)
	if err := b.waitJS(`document.querySelector('select[data-policy="type:GPU"]')`, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Chosen and saved in one script, as above.
	b.js(`document.querySelector('select[data-policy="type:GPU"]').value = 'WorstFit', document.querySelector('[data-action="save-policy"][data-id="type:GPU"]').click()`)
	eventually(t, "GPU policy WorstFit after Save in the UI", func() (bool, any) {
		var pol wire.Policies
		c.call("GET", "/v1/policies", nil, http.StatusOK, &pol)
		return pol.Types[wire.GPU].Policy == wire.WorstFit, pol.Types[wire.GPU]
	})

	// The refusal's page shows its why-not.
	b.js(`location.hash = '#/allocations/` + refused.ID + `'`)
	if err := b.waitJS(`document.getElementById('why-not')`, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	why := b.text("#why-not")
	if refused.WhyNot == nil || !strings.Contains(why, refused.WhyNot.Summary) || !strings.Contains(why, "Claim 0: 12× GPU") {
		t.Fatalf("why-not page %q lacks %+v", why, refused.WhyNot)
	}
	b.screenshot("refusal")
	b.check("after the actions")

	// A phone: the devices page fits the screen's width.
	phone := newBrowser(t, 600, 900)
	phone.run(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(c.base+"/ui/#/devices"))
	if err := phone.waitJS(`document.querySelectorAll('.hostrow').length === 3`, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if !eval[bool](phone, `document.documentElement.scrollWidth <= window.innerWidth + 1`) {
		t.Error("the devices page is wider than a phone's screen")
	}
	phone.screenshot("phone-devices")
	phone.check("phone")
}

// TestUIAsksForToken: with ACLs on, the UI asks for a token, keeps it in
// the tab's session storage only, and shows the cluster with it.
func TestUIAsksForToken(t *testing.T) {
	c := startCluster(t, 1, api.Options{ACLEnabled: true})
	var tok wire.ACLToken
	c.call("POST", "/v1/acl/bootstrap", nil, http.StatusOK, &tok)
	b := newBrowser(t, 1100, 800)
	b.setDenied(true)
	b.run(chromedp.Navigate(c.base + "/ui/"))
	// The first page of a fresh browser: allow for a loaded machine.
	if err := b.waitJS(`document.getElementById('token-dialog').open`, 30*time.Second); err != nil {
		t.Fatalf("no token dialog with ACLs on: %v", err)
	}
	b.screenshot("token")
	b.run(chromedp.SendKeys(chromedp.CSS(`#token-input`), tok.SecretID), chromedp.Click(chromedp.CSS(`#token-save`)))
	if err := b.waitJS(`document.querySelector('#results .cards') && document.getElementById('live').textContent === 'live'`, 10*time.Second); err != nil {
		t.Fatalf("overview with the token: %v", err)
	}
	stored := eval[string](b, `sessionStorage.getItem('dmsc.token')`)
	local := eval[string](b, `String(localStorage.length) + document.cookie`)
	if stored != tok.SecretID || local != "0" {
		t.Fatalf("token in session storage %q; local storage and cookies %q", stored, local)
	}
	b.setDenied(false)
	b.check("with the token")
}

// BenchmarkUIPages measures the devices and overview pages at 1,000
// hosts of 8 GPUs. render-ms (devices) is building the grid from the data
// the page holds and laying it out (a forced layout, so the browser's
// style and layout work counts); refresh-ms is what a change costs the
// page: fetching what it shows, rendering and laying it out.
func BenchmarkUIPages(b *testing.B) {
	c := startCluster(b, 1, api.Options{})
	var cmds []fsm.Command
	for i := range 1000 {
		cmds = append(cmds, gpus(fmt.Sprintf("host-%04d", i), 8))
	}
	c.apply(cmds...)
	br := newBrowser(b, 1280, 860)
	br.run(chromedp.Navigate(c.base + "/ui/#/devices"))
	if err := br.waitJS(`document.querySelectorAll('.hostrow').length === 1000`, time.Minute); err != nil {
		b.Fatal(err)
	}
	const refresh = `(async () => { const t0 = performance.now(); await refresh(); document.body.offsetHeight; return performance.now() - t0; })()`
	b.Run("devices", func(b *testing.B) {
		var render, total float64
		for range b.N {
			render += eval[float64](br, `(() => { const t0 = performance.now(); views.devices.render(); document.body.offsetHeight; return performance.now() - t0; })()`)
			total += eval[float64](br, refresh)
		}
		b.ReportMetric(render/float64(b.N), "render-ms")
		b.ReportMetric(total/float64(b.N), "refresh-ms")
	})
	b.Run("overview", func(b *testing.B) {
		br.js(`location.hash = '#/overview'`)
		if err := br.waitJS(`document.querySelector('#results .cards')`, time.Minute); err != nil {
			b.Fatal(err)
		}
		var total float64
		for range b.N {
			total += eval[float64](br, refresh)
		}
		b.ReportMetric(total/float64(b.N), "refresh-ms")
	})
	br.check("1,000 hosts")
}
