package main

import (
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dmsc/dmsc/internal/certs"
)

// An agent with TLS serves its API over HTTPS only, to clients with a
// certificate when verify_https_client is on, and takes new certificate
// files on SIGHUP.
func TestAgentHTTPSAndReloadOnHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an agent")
	}
	if runtime.GOOS == "windows" {
		t.Skip("sends SIGHUP")
	}
	dir := t.TempDir()
	ca, caKey, err := certs.WriteCA(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	server, err := certs.WriteCert(dir, ca, caKey, certs.Request{Role: certs.Server, Node: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	clientFiles, err := certs.WriteCert(dir, ca, caKey, certs.Request{Role: certs.Client})
	if err != nil {
		t.Fatal(err)
	}
	logs, stop := startAgent(t, []string{"-server", "-bootstrap-expect", "1", "-node", "s1", "-data-dir", filepath.Join(dir, "data"),
		"-bind", "127.0.0.1", "-http-addr", "127.0.0.1:0", "-raft-port", "0", "-rpc-port", "0", "-gossip-port", "0",
		"-tls-ca-file", ca, "-tls-cert-file", server.Cert, "-tls-key-file", server.Key, "-tls-verify-https-client"})
	addr, ok := logs.find(regexp.MustCompile(`HTTP API listening: address=(\S+)`), time.Now().Add(30*time.Second), nil)
	if !ok {
		t.Fatalf("no HTTP address logged:\n%s", logs.text())
	}

	clientStore, err := certs.Load(clientFiles)
	if err != nil {
		t.Fatal(err)
	}
	// serial returns the serial of the certificate the agent serves, and
	// the status of GET path.
	get := func(store *certs.Store, path string) (*big.Int, int, error) {
		tr := &http.Transport{TLSClientConfig: store.ClientConfig(certs.Identity{Role: certs.Server, Node: "s1"})}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("https://" + addr + path)
		if err != nil {
			return nil, 0, err
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber, resp.StatusCode, nil
	}
	waitFor := func(what string, cond func() error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := cond()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %v\n%s", what, err, logs.text())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var first *big.Int
	waitFor("/v1/ready over HTTPS", func() error {
		s, code, err := get(clientStore, "/v1/ready")
		if err == nil && code != http.StatusOK {
			err = errors.New(http.StatusText(code))
		}
		first = s
		return err
	})
	if _, code, err := get(clientStore, "/v1/health"); err != nil || code != http.StatusOK {
		t.Fatalf("/v1/health over HTTPS: %d %v", code, err)
	}
	if resp, err := http.Get("http://" + addr + "/v1/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP got %d", resp.StatusCode)
		}
	}
	noCert, err := certs.Load(certs.Files{CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	if _, code, err := get(noCert, "/v1/health"); err == nil {
		t.Fatalf("a client without a certificate got %d", code)
	}
	// The CLI takes the CA and the client certificate.
	code, out, errOut := runCLI(t, "members", "-address", addr, "-ca-cert", ca, "-client-cert", clientFiles.Cert, "-client-key", clientFiles.Key)
	if code != exitOK || !strings.Contains(out, "s1") {
		t.Fatalf("dmsc members over HTTPS: exit %d, %q %q", code, out, errOut)
	}
	if code, _, _ := runCLI(t, "members", "-address", "https://"+addr, "-ca-cert", ca); code != exitError {
		t.Fatalf("dmsc members without a client certificate: exit %d", code)
	}

	// New files for s1 in place of the old ones, then SIGHUP.
	next, err := certs.WriteCert(t.TempDir(), ca, caKey, certs.Request{Role: certs.Server, Node: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{next.Cert: server.Cert, next.Key: server.Key} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := self.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var second *big.Int
	waitFor("the new certificate served", func() error {
		s, _, err := get(clientStore, "/v1/health")
		if err == nil && s.Cmp(first) == 0 {
			err = errors.New("still the old certificate")
		}
		second = s
		return err
	})
	if !strings.Contains(logs.text(), "SIGHUP: TLS files reloaded") {
		t.Fatalf("no reload logged:\n%s", logs.text())
	}
	// Broken files are not taken: the agent keeps serving the last good
	// ones and says so.
	if err := os.WriteFile(server.Cert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := self.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the failed reload logged", func() error {
		if !strings.Contains(logs.text(), "TLS files not reloaded") {
			return errors.New("not yet")
		}
		return nil
	})
	if s, _, err := get(clientStore, "/v1/health"); err != nil || s.Cmp(second) != 0 {
		t.Fatalf("after a failed reload: serial %v, %v", s, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
