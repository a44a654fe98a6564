package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// benchServer has a host with the given number of GPUs and the given
// number of released allocations in the history.
func benchServer(b *testing.B, gpus, history int) *Server {
	b.Helper()
	srv := New(newFake(), Options{})
	var devs []string
	for i := range gpus {
		devs = append(devs, fmt.Sprintf(`{"id":"g%05d","type":"GPU","capabilities":{"memory_gb":80}}`, i))
	}
	do := func(method, path, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, jsonRequest(method, path, body))
		if rec.Code >= 300 {
			b.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		return rec
	}
	do("PUT", "/v1/hosts/h1", `{"devices":[`+strings.Join(devs, ",")+`]}`)
	for range history {
		rec := do("POST", "/v1/allocations", gpuReq)
		id := rec.Body.String()[7:43]
		do("POST", "/v1/allocations/"+id+"/release", "")
	}
	return srv
}

// jsonRequest is a request with a JSON body, as the API asks.
func jsonRequest(method, path, body string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// BenchmarkCreateRelease is one allocate and one release through the
// handler (decode, apply on the fake, encode).
func BenchmarkCreateRelease(b *testing.B) {
	srv := benchServer(b, 1000, 0)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, jsonRequest("POST", "/v1/allocations", gpuReq))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
		id := rec.Body.String()[7:43]
		rec = httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/allocations/"+id+"/release", nil))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkListHistory is one page of 100 from 10,000 retained
// allocations, newest first.
func BenchmarkListHistory(b *testing.B) {
	srv := benchServer(b, 8, 10000)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/history?reverse=true&limit=100", nil))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkGetAllocation reads one allocation among 10,000.
func BenchmarkGetAllocation(b *testing.B) {
	srv := benchServer(b, 8, 10000)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/history?limit=1", nil))
	id := rec.Body.String()[23:59]
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/allocations/"+id, nil))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}
