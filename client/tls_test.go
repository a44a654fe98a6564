package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/internal/certs"
)

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, err := certs.WriteCA(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	serverFiles, err := certs.WriteCert(dir, ca, caKey, certs.Request{Role: certs.Server, Node: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	clientFiles, err := certs.WriteCert(dir, ca, caKey, certs.Request{Role: certs.Client})
	if err != nil {
		t.Fatal(err)
	}
	store, err := certs.Load(serverFiles)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok","node":"s1"}`))
	}))
	srv.TLS = store.ServerConfig(true)
	srv.StartTLS()
	defer srv.Close()
	hostPort := strings.TrimPrefix(srv.URL, "https://")
	ctx := context.Background()

	// An address without a scheme is https once TLS is configured.
	c, err := client.New(client.Config{Addresses: []string{hostPort}, TLS: &client.TLSConfig{
		CACert: ca, ClientCert: clientFiles.Cert, ClientKey: clientFiles.Key,
	}, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Addresses(); got[0] != "https://"+hostPort {
		t.Fatalf("addresses %v", got)
	}
	if h, err := c.Health(ctx); err != nil || h.Node != "s1" {
		t.Fatalf("health over mutual TLS: %+v %v", h, err)
	}
	// The names of the certificate can stand for the address dialed.
	c, _ = client.New(client.Config{Addresses: []string{srv.URL}, TLS: &client.TLSConfig{
		CACert: ca, ClientCert: clientFiles.Cert, ClientKey: clientFiles.Key, ServerName: "server.dmsc",
	}, MaxRetries: -1})
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("health with server name server.dmsc: %v", err)
	}
	// Without the client certificate, or without the CA, no answer.
	for name, tc := range map[string]*client.TLSConfig{
		"no client certificate": {CACert: ca},
		"no CA":                 {ClientCert: clientFiles.Cert, ClientKey: clientFiles.Key},
		"wrong server name":     {CACert: ca, ClientCert: clientFiles.Cert, ClientKey: clientFiles.Key, ServerName: "host.dmsc"},
	} {
		c, err := client.New(client.Config{Addresses: []string{srv.URL}, TLS: tc, MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Health(ctx); err == nil {
			t.Errorf("%s: answered", name)
		}
	}
	// The environment configures TLS when Config.TLS is nil.
	t.Setenv(client.CACertEnv, ca)
	t.Setenv(client.ClientCertEnv, clientFiles.Cert)
	t.Setenv(client.ClientKeyEnv, clientFiles.Key)
	t.Setenv(client.AddressEnv, "")
	c, err = client.New(client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Addresses(); got[0] != "https://127.0.0.1:4646" {
		t.Fatalf("default address with TLS: %v", got)
	}
	c, _ = client.New(client.Config{Addresses: []string{hostPort}, MaxRetries: -1})
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("health with TLS from the environment: %v", err)
	}

	for name, cfg := range map[string]client.Config{
		"missing CA file":    {TLS: &client.TLSConfig{CACert: filepath.Join(dir, "none.pem")}},
		"CA file not PEM":    {TLS: &client.TLSConfig{CACert: serverFiles.Key}},
		"cert without key":   {TLS: &client.TLSConfig{ClientCert: clientFiles.Cert}},
		"TLS and HTTPClient": {TLS: &client.TLSConfig{CACert: ca}, HTTPClient: http.DefaultClient},
	} {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
