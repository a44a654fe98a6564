package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/internal/certs"
)

// tlsExitCodesHelp documents the exit codes of the tls subcommands.
const tlsExitCodesHelp = `Exit codes:

  0  the files were written
  1  error: a file exists already, or the CA cannot be read or used
  2  usage: bad flags or arguments`

// tlsCACreateCommand is `dmsc tls ca create`.
type tlsCACreateCommand struct{ ui cli.Ui }

func (c *tlsCACreateCommand) Synopsis() string { return "Create the cluster's certificate authority" }

func (c *tlsCACreateCommand) Help() string {
	return strings.TrimSpace(fmt.Sprintf(`
Usage: dmsc tls ca create [options]

  Creates the cluster's CA in the current directory, as %s (give it
  to every agent, -tls-ca-file, and client, -ca-cert) and %s (its
  key: keep it secret; dmsc tls cert create signs with it). An existing
  file is never overwritten.

Options:

  -days=<n>
      How long the CA is valid, in days. Default: %d.

%s`, certs.CAFile, certs.CAKeyFile, certs.DefaultCADays, tlsExitCodesHelp))
}

func (c *tlsCACreateCommand) Run(args []string) int {
	fs := flag.NewFlagSet("tls ca create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	days := fs.Int("days", certs.DefaultCADays, "")
	if code, ok := parseTLSFlags(c.ui, fs, args, c.Help()); !ok {
		return code
	}
	if *days <= 0 {
		return tlsUsage(c.ui, fs.Name(), "-days must be positive")
	}
	certFile, keyFile, err := certs.WriteCA(".", *days)
	if err != nil {
		c.ui.Error("Error: " + err.Error())
		return exitError
	}
	c.ui.Output(strings.TrimRight(table([]string{"FILE", "CONTENT"}, [][]string{
		{certFile, "CA certificate: give it to every agent (-tls-ca-file) and client (-ca-cert)"},
		{keyFile, "CA key: keep it secret; dmsc tls cert create signs with it"},
	}), "\n"))
	c.ui.Output("")
	c.ui.Output(strings.TrimRight(keyValues(certSummary(certFile)), "\n"))
	return exitOK
}

// tlsCertCreateCommand is `dmsc tls cert create`.
type tlsCertCreateCommand struct{ ui cli.Ui }

func (c *tlsCertCreateCommand) Synopsis() string {
	return "Create a certificate for a server, a host or a client"
}

func (c *tlsCertCreateCommand) Help() string {
	return strings.TrimSpace(fmt.Sprintf(`
Usage: dmsc tls cert create -server|-host|-client [options]

  Creates a certificate signed by the cluster's CA, and its key, in the
  current directory as <role>-<node>.pem and <role>-<node>-key.pem
  (server-s1.pem, host-h1.pem; a client without -node: client-0.pem,
  client-1.pem, ...). An existing file is never overwritten.

  The certificate says who holds it: its DNS names carry the role
  (server.dmsc, host.dmsc, client.dmsc) and, for a server or a host, the
  node's name (s1.server.dmsc). An agent takes only a certificate of its
  own role and -node name; Raft and the node RPC take only servers'
  certificates (and hosts' for the writes they forward); the leader takes
  a host's devices only from the node whose certificate names that host.
  Every certificate also names localhost and 127.0.0.1; add the names
  and addresses clients use to reach the agent's HTTPS API with -dns and
  -ip.

  Example, for a server at 10.0.0.11:

      dmsc tls cert create -server -node s1 -ip 10.0.0.11

Options:

  -server, -host, -client
      The role: exactly one.

  -node=<name>
      The node's name, as the agent's -node. Required for a server or a
      host.

  -dns=<name>, -ip=<address>
      More names and IP addresses for the certificate; repeat them or
      separate them with commas.

  -ca=<file>, -key=<file>
      The CA's certificate and key. Default: %s and %s.

  -days=<n>
      How long the certificate is valid, in days. Default: %d.

%s`, certs.CAFile, certs.CAKeyFile, certs.DefaultCertDays, tlsExitCodesHelp))
}

func (c *tlsCertCreateCommand) Run(args []string) int {
	fs := flag.NewFlagSet("tls cert create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	server := fs.Bool("server", false, "")
	host := fs.Bool("host", false, "")
	clientRole := fs.Bool("client", false, "")
	node := fs.String("node", "", "")
	var dns, ips []string
	fs.Func("dns", "", func(v string) error { dns = append(dns, splitAddresses(v)...); return nil })
	fs.Func("ip", "", func(v string) error { ips = append(ips, splitAddresses(v)...); return nil })
	ca := fs.String("ca", certs.CAFile, "")
	caKey := fs.String("key", certs.CAKeyFile, "")
	days := fs.Int("days", certs.DefaultCertDays, "")
	if code, ok := parseTLSFlags(c.ui, fs, args, c.Help()); !ok {
		return code
	}
	var roles []certs.Role
	for _, r := range []struct {
		set  bool
		role certs.Role
	}{{*server, certs.Server}, {*host, certs.Host}, {*clientRole, certs.Client}} {
		if r.set {
			roles = append(roles, r.role)
		}
	}
	if len(roles) != 1 {
		return tlsUsage(c.ui, fs.Name(), "give exactly one of -server, -host and -client")
	}
	req := certs.Request{Role: roles[0], Node: *node, DNS: dns, Days: *days}
	if req.Role != certs.Client && req.Node == "" {
		return tlsUsage(c.ui, fs.Name(), "a %s certificate needs -node, the agent's node name", req.Role)
	}
	if *days <= 0 {
		return tlsUsage(c.ui, fs.Name(), "-days must be positive")
	}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return tlsUsage(c.ui, fs.Name(), "-ip %q is not an IP address", s)
		}
		req.IPs = append(req.IPs, ip)
	}
	f, err := certs.WriteCert(".", *ca, *caKey, req)
	if err != nil {
		c.ui.Error("Error: " + err.Error())
		if errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "CA file") {
			c.ui.Error("Create the CA first with 'dmsc tls ca create', or name it with -ca and -key.")
		}
		return exitError
	}
	who := "a client"
	if req.Role != certs.Client {
		who = fmt.Sprintf("%s %q", req.Role, req.Node)
	}
	c.ui.Output(strings.TrimRight(table([]string{"FILE", "CONTENT"}, [][]string{
		{f.Cert, fmt.Sprintf("certificate of %s, signed by %s", who, f.CA)},
		{f.Key, "its key: keep it secret"},
	}), "\n"))
	c.ui.Output("")
	c.ui.Output(strings.TrimRight(keyValues(certSummary(f.Cert)), "\n"))
	return exitOK
}

// certSummary describes the certificate in a PEM file: its names,
// addresses and end of validity.
func certSummary(path string) [][2]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return [][2]string{{"Error", err.Error()}}
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return [][2]string{{"Error", path + " holds no PEM block"}}
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return [][2]string{{"Error", err.Error()}}
	}
	out := [][2]string{{"Subject", cert.Subject.CommonName}}
	if len(cert.DNSNames) > 0 {
		out = append(out, [2]string{"DNS names", strings.Join(cert.DNSNames, ", ")})
	}
	if len(cert.IPAddresses) > 0 {
		ips := make([]string, len(cert.IPAddresses))
		for i, ip := range cert.IPAddresses {
			ips[i] = ip.String()
		}
		out = append(out, [2]string{"IP addresses", strings.Join(ips, ", ")})
	}
	return append(out, [2]string{"Valid until", cert.NotAfter.UTC().Format(time.RFC3339)})
}

// parseTLSFlags parses the flags of a tls subcommand, which takes no
// arguments. When ok is false the command exits with code: 0 after -h,
// exitUsage after an error (both printed).
func parseTLSFlags(ui cli.Ui, fs *flag.FlagSet, args []string, help string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			ui.Output(help)
			return exitOK, false
		}
		return tlsUsage(ui, fs.Name(), "%v", err), false
	}
	if fs.NArg() > 0 {
		return tlsUsage(ui, fs.Name(), "dmsc %s takes no arguments; got %q", fs.Name(), fs.Arg(0)), false
	}
	return 0, true
}

// tlsUsage prints a usage error and returns exitUsage.
func tlsUsage(ui cli.Ui, name, format string, args ...any) int {
	ui.Error(fmt.Sprintf(format, args...))
	ui.Error(fmt.Sprintf("Run 'dmsc %s -h' for usage.", name))
	return exitUsage
}

// tlsCommands are the certificate subcommands.
func tlsCommands(ui cli.Ui) map[string]cli.CommandFactory {
	parent := func(name, synopsis string, subs ...string) cli.CommandFactory {
		return func() (cli.Command, error) {
			return &parentCommand{ui: ui, name: name, synopsis: synopsis, subs: subs}, nil
		}
	}
	return map[string]cli.CommandFactory{
		"tls":             parent("tls", "Create the cluster's CA and certificates", "ca", "cert"),
		"tls ca":          parent("tls ca", "Create the cluster's certificate authority", "create"),
		"tls ca create":   func() (cli.Command, error) { return &tlsCACreateCommand{ui: ui}, nil },
		"tls cert":        parent("tls cert", "Create certificates for servers, hosts and clients", "create"),
		"tls cert create": func() (cli.Command, error) { return &tlsCertCreateCommand{ui: ui}, nil },
	}
}
