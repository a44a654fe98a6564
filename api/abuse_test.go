package api

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

func TestWritesTakeOnlyJSON(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	cases := []struct {
		name, method, path, body, ctype string
		want                            int
	}{
		{"text/plain body", "POST", "/v1/devices/g1/drain", `{}`, "text/plain", 415},
		{"form body", "POST", "/v1/allocations", gpuReq, "application/x-www-form-urlencoded", 415},
		{"multipart", "PUT", "/v1/retention", `{"max_count":5,"max_age":"1h"}`, "multipart/form-data; boundary=x", 415},
		{"text/plain without body", "POST", "/v1/devices/g1/drain", ``, "text/plain", 415},
		{"snapshot as json", "PUT", "/v1/snapshot", `{}`, "application/json", 415},
		{"json with charset", "POST", "/v1/devices/g1/drain", `{}`, "application/json; charset=utf-8", 200},
		{"no body no type", "POST", "/v1/devices/g1/undrain", ``, "", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			var rd *strings.Reader
			if c.body != "" {
				rd = strings.NewReader(c.body)
			}
			req := httptest.NewRequest(c.method, c.path, nil)
			if rd != nil {
				req = httptest.NewRequest(c.method, c.path, rd)
			}
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			before := e.b.applyCount()
			rec := httptest.NewRecorder()
			e.srv.ServeHTTP(rec, req)
			r := &resp{t: t, code: rec.Code, hdr: rec.Header(), body: rec.Body.Bytes()}
			if c.want == 415 {
				r.apiErr(415, wire.CodeUnsupportedMediaType)
				if e.b.applyCount() != before {
					t.Fatal("a refused write was applied")
				}
				return
			}
			r.ok(c.want)
		})
	}
}

func TestCrossOriginWriteRefused(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	e.noSideEffect(func() {
		e.do("POST", "/v1/devices/g1/drain", `{}`, "Origin", "https://evil.example").apiErr(403, wire.CodeCrossOrigin)
		e.do("POST", "/v1/devices/g1/drain", ``, "Sec-Fetch-Site", "cross-site").apiErr(403, wire.CodeCrossOrigin)
	})
	// Same origin (the Host of httptest requests is example.com) is served.
	e.do("POST", "/v1/devices/g1/drain", `{}`, "Origin", "http://example.com").ok(200)
}

func TestLoopbackHostRule(t *testing.T) {
	e := newEnv(t, Options{LoopbackOnly: true})
	for host, ok := range map[string]bool{
		"localhost": true, "localhost:4646": true, "127.0.0.1:4646": true, "127.8.9.10": true,
		"[::1]:4646": true, "[::1]": true, "app.localhost:4646": true, "LOCALHOST.": true,
		"evil.example": false, "evil.example:4646": false, "10.0.0.1:4646": false,
		"127.0.0.1.evil.example": false, "[::2]:4646": false,
	} {
		req := httptest.NewRequest("GET", "/v1/health", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		r := &resp{t: t, code: rec.Code, hdr: rec.Header(), body: rec.Body.Bytes()}
		if ok {
			r.ok(200)
		} else {
			r.apiErr(403, wire.CodeHostNotAllowed)
		}
	}
	// Without LoopbackOnly any Host is served.
	e2 := newEnv(t, Options{})
	req := httptest.NewRequest("GET", "/v1/health", nil)
	req.Host = "evil.example"
	rec := httptest.NewRecorder()
	e2.srv.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
}

// memAuditor keeps records.
type memAuditor struct {
	mu   sync.Mutex
	recs []AuditRecord
}

func (m *memAuditor) Audit(r AuditRecord) {
	m.mu.Lock()
	m.recs = append(m.recs, r)
	m.mu.Unlock()
}

func TestAuditRecordsEveryWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log, err := OpenAuditLog(path, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Options{Auditor: log})
	e.seed()                               // 2 writes, 200
	e.do("GET", "/v1/devices", "").ok(200) // a read: not logged
	e.do("POST", "/v1/allocations", gpuReq, "X-Request-Id", "job-1").ok(200)
	e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":0}]}`).ok(400)
	e.do("POST", "/v1/devices/g1/drain", `{}`, "Content-Type", "text/plain").ok(415)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), data)
	}
	wantStatus := []int{200, 200, 200, 400, 415}
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i, err, line)
		}
		for _, k := range []string{"time", "accessor", "method", "path", "status", "remote_addr"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %d has no %s: %s", i, k, line)
			}
		}
		if ts, _ := m["time"].(string); ts == "" {
			t.Errorf("line %d: time %v", i, m["time"])
		} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("line %d: time %q: %v", i, ts, err)
		}
		if int(m["status"].(float64)) != wantStatus[i] {
			t.Errorf("line %d: status %v, want %d", i, m["status"], wantStatus[i])
		}
	}
	var rec AuditRecord
	_ = json.Unmarshal([]byte(lines[2]), &rec)
	if rec.Method != "POST" || rec.Path != "/v1/allocations" || rec.RequestID != "job-1" {
		t.Fatalf("allocate record %+v", rec)
	}
}

func TestAuditLogRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	const maxBytes = 1000
	log, err := OpenAuditLog(path, maxBytes, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := AuditRecord{Time: time.Now(), Method: "POST", Path: "/v1/allocations", Status: 200, RemoteAddr: "127.0.0.1:1"}
	line, _ := json.Marshal(rec)
	perFile := maxBytes / (len(line) + 1)
	for i := 0; i < perFile*4; i++ {
		log.Audit(rec)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + ".1", path + ".2"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > maxBytes {
			t.Errorf("%s has %d bytes, more than %d", p, st.Size(), maxBytes)
		}
		f, _ := os.Open(p)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Errorf("%s: %q is not JSON", p, sc.Text())
			}
		}
		f.Close()
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3 kept: %v", path, err)
	}
}

func TestReadyReportsRefusals(t *testing.T) {
	e := newEnv(t, Options{})
	e.do("GET", "/v1/ready", "").ok(200)
	now := time.Unix(1000, 0)
	e.srv.load.now = func() time.Time { return now }
	for i := 0; i < 30; i++ {
		e.srv.load.note(i%3 != 0) // two in three refused
	}
	var st wire.NodeStatus
	e.do("GET", "/v1/ready", "").ok(503).decode(&st)
	if st.Ready || !strings.Contains(st.Reason, "refused") {
		t.Fatalf("%+v", st)
	}
	e.do("GET", "/v1/health", "").ok(200)
	now = now.Add(loadSeconds * time.Second)
	e.do("GET", "/v1/ready", "").ok(200)
}

func TestPerClientSlots(t *testing.T) {
	e := newEnv(t, Options{MaxInFlight: 8, MaxInFlightPerClient: 2})
	e.seed()
	gate := make(chan struct{})
	e.b.mu.Lock()
	e.b.applyGate = gate
	e.b.mu.Unlock()
	send := func(remote string) chan int {
		done := make(chan int, 1)
		go func() {
			req := httptest.NewRequest("POST", "/v1/allocations", strings.NewReader(gpuReq))
			req.Header.Set("Content-Type", "application/json")
			req.RemoteAddr = remote
			rec := httptest.NewRecorder()
			e.srv.ServeHTTP(rec, req)
			done <- rec.Code
		}()
		return done
	}
	a1, a2 := send("127.0.0.2:1000"), send("127.0.0.2:1001")
	waitFor(t, func() bool {
		e.b.mu.Lock()
		defer e.b.mu.Unlock()
		return e.b.gated == 2
	})
	if code := <-send("127.0.0.2:1002"); code != 429 {
		t.Fatalf("third request of one address: %d, want 429", code)
	}
	other := send("127.0.0.1:1000")
	waitFor(t, func() bool {
		e.b.mu.Lock()
		defer e.b.mu.Unlock()
		return e.b.gated == 3
	})
	close(gate)
	for _, c := range []chan int{a1, a2, other} {
		if code := <-c; code != 200 {
			t.Fatalf("status %d", code)
		}
	}
}

// TestSlowBodyTimesOut: a body that stops arriving is answered 408 once
// the body timeout passes, and frees its slot.
func TestSlowBodyTimesOut(t *testing.T) {
	e := newEnv(t, Options{BodyTimeout: 300 * time.Millisecond, MaxInFlight: 1})
	e.seed()
	ts := httptest.NewServer(e.srv)
	defer ts.Close()
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = conn.Write([]byte("POST /v1/allocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d, want 408", res.StatusCode)
	}
	r, err := http.Get(ts.URL + "/v1/devices")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("after a slow body: %d", r.StatusCode)
	}
}

func TestSnapshotUploadGarbage(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, Options{SnapshotDir: dir, MaxSnapshotBytes: 1 << 20})
	e.seed()
	e.noSideEffect(func() {
		for _, body := range []string{"garbage", "DMSCFSM1" + strings.Repeat("\x00", 16) + "[]", `{"version":999}`, `{"nope":1}`} {
			e.do("PUT", "/v1/snapshot", body).apiErr(400, wire.CodeBadSnapshot)
		}
		e.do("PUT", "/v1/snapshot", "{"+strings.Repeat("x", 2<<20)).apiErr(413, wire.CodeBodyTooLarge)
	})
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Fatalf("upload files left: %v", left)
	}
	// A real snapshot restores.
	snap := e.do("GET", "/v1/snapshot", "").ok(200).body
	e.do("PUT", "/v1/snapshot", string(snap)).ok(200)
	// Uploads are taken one at a time; one that waits too long is 429.
	defer func(d time.Duration) { snapshotQueueWait = d }(snapshotQueueWait)
	snapshotQueueWait = 50 * time.Millisecond
	e.srv.uploads <- struct{}{}
	e.do("PUT", "/v1/snapshot", string(snap)).apiErr(429, wire.CodeOverloaded)
	<-e.srv.uploads
}

// TestAuditNamesTheToken: with ACLs on, each line names the accessor of
// the token the write carried, whether it was carried out, refused by the
// ACL check or refused before it (415).
func TestAuditNamesTheToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log, err := OpenAuditLog(path, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, mgmt := newACLEnv(t, Options{Auditor: log})
	e.policy("reader", wire.ACLRules{Namespaces: map[string]string{"default": "read"}})
	reader := e.newToken("reader")
	var self wire.ACLToken
	e.do("GET", "/v1/acl/token/self", "", wire.HeaderToken, reader).ok(200).decode(&self)
	var boot wire.ACLToken
	e.do("GET", "/v1/acl/token/self", "", wire.HeaderToken, mgmt).ok(200).decode(&boot)

	e.do("POST", "/v1/allocations", gpuReq, wire.HeaderToken, reader).ok(403)
	e.do("POST", "/v1/devices/g1/drain", `{}`, "Content-Type", "text/plain", wire.HeaderToken, mgmt).ok(415)
	e.do("POST", "/v1/allocations", gpuReq, wire.HeaderToken, "not-a-token").ok(401)
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	want := []struct {
		accessor string
		status   int
	}{{self.AccessorID, 403}, {boot.AccessorID, 415}, {"unknown", 401}}
	if len(lines) < len(want) {
		t.Fatalf("%d lines:\n%s", len(lines), data)
	}
	for i, w := range want {
		var rec AuditRecord
		line := lines[len(lines)-len(want)+i]
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Accessor != w.accessor || rec.Status != w.status {
			t.Errorf("line %q: want accessor %q and status %d", line, w.accessor, w.status)
		}
	}
}
