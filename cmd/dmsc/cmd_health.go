package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// checkReadyCommand is `dmsc check-ready`: a probe of one agent's
// /v1/ready (or, with -live, /v1/health) for health checks in images that
// have no shell or curl (the scratch image of deploy/Dockerfile). It exits
// 0 when the agent answers 200 and 1 otherwise, so it can be a Docker or
// compose HEALTHCHECK or a Kubernetes exec probe.
type checkReadyCommand struct{ ui cli.Ui }

// defaultCheckTimeout bounds one probe.
const defaultCheckTimeout = 3 * time.Second

func (c *checkReadyCommand) Synopsis() string {
	return "Exit 0 when the local agent is ready (a health check)"
}

func (c *checkReadyCommand) Help() string {
	return strings.TrimSpace(`
Usage: dmsc check-ready [options]

  Asks one agent whether it is ready (GET /v1/ready: a server knows a
  leader and has caught up with it; a host has joined the cluster) and
  exits 0 when it answers 200, 1 otherwise. With -live it asks whether the
  agent serves HTTP at all (GET /v1/health) instead. It prints one line
  saying what it saw.

  Meant for health checks where no shell or curl is at hand:

      HEALTHCHECK CMD ["/dmsc", "check-ready"]

  The agent checked is the local one: the port comes from $DMSC_HTTP_ADDR
  when set (an unspecified or wildcard host becomes 127.0.0.1), else
  127.0.0.1:4646. $DMSC_ADDR, the CLI's target, is ignored on purpose: a
  health check is about this agent, not the cluster.

  An agent with TLS on serves HTTPS: with a TLS option below, or else
  with the agent's own $DMSC_TLS_CA_FILE (then its $DMSC_TLS_CERT_FILE
  and $DMSC_TLS_KEY_FILE are presented, for an agent that verifies HTTPS
  clients), the probe speaks HTTPS to the local agent as 127.0.0.1.

Options:

  -address URL
      The agent's HTTP API, e.g. http://127.0.0.1:4646.
  -live
      Check /v1/health (the process serves HTTP) instead of /v1/ready.
  -timeout DURATION
      Give up after this long (default 3s).
  -ca-cert FILE, -client-cert FILE, -client-key FILE, -tls-server-name NAME
      TLS, as for every API subcommand. Default: $DMSC_CACERT,
      $DMSC_CLIENT_CERT, $DMSC_CLIENT_KEY, $DMSC_TLS_SERVER_NAME.
`)
}

func (c *checkReadyCommand) Run(args []string) int {
	fs := flag.NewFlagSet("check-ready", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	address := fs.String("address", "", "")
	live := fs.Bool("live", false, "")
	timeout := fs.Duration("timeout", defaultCheckTimeout, "")
	var tlsOpts client.TLSConfig
	tlsFlags(fs, &tlsOpts)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.ui.Output(c.Help())
			return 0
		}
		c.ui.Error(fmt.Sprintf("dmsc check-ready: %v\n\n%s", err, c.Help()))
		return 1
	}
	if fs.NArg() > 0 {
		c.ui.Error("dmsc check-ready takes no arguments")
		return 1
	}
	if tlsOpts == (client.TLSConfig{}) {
		tlsOpts = agentTLS(os.Getenv)
	}
	base := *address
	if base == "" {
		base = localAgentAddress(os.Getenv("DMSC_HTTP_ADDR"))
	}
	if !strings.Contains(base, "://") {
		if tlsOpts != (client.TLSConfig{}) {
			base = "https://" + base
		} else {
			base = "http://" + base
		}
	}
	hc := http.DefaultClient
	if tlsOpts != (client.TLSConfig{}) {
		tc, err := tlsOpts.TLSClientConfig()
		if err != nil {
			c.ui.Error(fmt.Sprintf("not ready: %v", err))
			return 1
		}
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		hc = &http.Client{Transport: tr}
	}
	path := "/v1/ready"
	if *live {
		path = "/v1/health"
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	line, err := probeAgent(ctx, hc, strings.TrimRight(base, "/")+path)
	if err != nil {
		c.ui.Error(fmt.Sprintf("not ready: %v", err))
		return 1
	}
	c.ui.Output(line)
	return 0
}

// localAgentAddress turns an agent's HTTP listen address into one to dial
// from the same machine: a wildcard or missing host becomes 127.0.0.1.
func localAgentAddress(listen string) string {
	const fallback = "127.0.0.1:4646"
	if listen == "" {
		return fallback
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fallback
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// agentTLS is the TLS of a probe of the local agent from the agent's own
// settings: its CA, and its certificate as a client's (the zero value
// when the agent's environment sets no CA).
func agentTLS(getenv func(string) string) client.TLSConfig {
	ca := getenv("DMSC_TLS_CA_FILE")
	if ca == "" {
		return client.TLSConfig{}
	}
	return client.TLSConfig{CACert: ca, ClientCert: getenv("DMSC_TLS_CERT_FILE"), ClientKey: getenv("DMSC_TLS_KEY_FILE")}
}

// probeAgent GETs url with hc and describes a 200 answer; anything else
// is an error that says why.
func probeAgent(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	var st wire.NodeStatus
	decoded := json.Unmarshal(body, &st) == nil && st.ID != ""
	if resp.StatusCode != http.StatusOK {
		if decoded {
			return "", fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, describeStatus(st))
		}
		return "", fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if decoded {
		return "ready: " + describeStatus(st), nil
	}
	return fmt.Sprintf("ok: %s", strings.TrimSpace(string(body))), nil
}

// describeStatus says in one line what a /v1/ready body shows.
func describeStatus(st wire.NodeStatus) string {
	if !st.Server {
		return fmt.Sprintf("%s (host) ready=%t", st.ID, st.Ready)
	}
	leader := st.Leader
	if !st.KnownLeader || leader == "" {
		leader = "none"
	}
	return fmt.Sprintf("%s %s term %d, leader %s, applied %d of %d, ready=%t",
		st.ID, st.State, st.Term, leader, st.AppliedIndex, st.CommitIndex, st.Ready)
}
