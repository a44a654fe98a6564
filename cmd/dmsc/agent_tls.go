package main

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/internal/agentconfig"
	"github.com/dmsc/dmsc/internal/certs"
)

// httpsListener makes the HTTP API's listener serve HTTPS with the
// agent's certificate when TLS is on (store not nil), requiring a client
// certificate of the CA when verify_https_client is on.
func httpsListener(ln net.Listener, store *certs.Store, cfg *agentconfig.Config) net.Listener {
	if store == nil {
		return ln
	}
	return tls.NewListener(ln, store.ServerConfig(cfg.TLSVerifyHTTPSClient))
}

// reloadOnHUP reloads the agent's certificate files on every SIGHUP
// until ctx ends, and logs the outcome: new connections (Raft, the node
// RPC, HTTPS) use the new files, established ones keep theirs. A reload
// that fails (a file missing or broken, a certificate of another node or
// CA) keeps the files loaded before. Without TLS a SIGHUP is logged and
// ignored. The returned function stops listening and waits.
func reloadOnHUP(ctx context.Context, store *certs.Store, log hclog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reloadTLS(store, log)
			}
		}
	})
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
}

// reloadTLS reloads store's files and logs what happened.
func reloadTLS(store *certs.Store, log hclog.Logger) {
	if store == nil {
		log.Info("SIGHUP: nothing to reload (TLS is off)")
		return
	}
	if err := store.Reload(); err != nil {
		log.Error("SIGHUP: TLS files not reloaded; the loaded ones stay in use", "error", err)
		return
	}
	id, _ := store.Identity()
	log.Info("SIGHUP: TLS files reloaded", "role", id.Role, "node", id.Node)
}
