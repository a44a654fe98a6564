package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// Exit codes of the API subcommands.
const (
	exitOK       = 0
	exitError    = 1 // the cluster or the network failed
	exitUsage    = 2 // bad flags or arguments, or values the API refused
	exitCapacity = 3 // refused: no device fits
	exitNotFound = 4 // no such allocation, device, host or server
	exitConflict = 5 // the state forbids it (not active, active, ...)
	exitDenied   = 6 // ACLs: the token is unknown or expired, or lacks the capability
)

// exitCodesHelp documents the exit codes in every API subcommand's help.
const exitCodesHelp = `Exit codes:

  0  success
  1  error: the cluster or the network failed (unreachable, no leader, ...)
  2  usage: bad flags or arguments, or values the API refused as invalid
  3  refused: no device fits the request (the why-not is printed)
  4  not found: no such allocation, device, host or server
  5  conflict: the state forbids it (release of an ended allocation, ...)
  6  denied: with ACLs on, the token is unknown or expired, or does not
     grant what the command needs`

// apiOptionsHelp documents the flags every API subcommand takes.
const apiOptionsHelp = `HTTP API options:

  -address=<addr>
      The HTTP API of the cluster: one node, or several separated by
      commas (reads are spread over them, writes follow the leader).
      Default: $DMSC_ADDR, else http://127.0.0.1:4646 (https:// with
      a TLS option).

  -token=<token>
      The ACL token's secret, sent as a bearer token. Default:
      $DMSC_TOKEN.

  -namespace=<namespace>
      The namespace allocations, the queue, the history, statistics and
      recommendations are in ("*": every namespace the token may read).
      Default: $DMSC_NAMESPACE, else default.

  -ca-cert=<file>
      PEM file of the CA that signed the agents' certificates, to verify
      an https:// address (dmsc-agent-ca.pem). Default: $DMSC_CACERT.
      With any TLS option set, an address without a scheme is https.

  -client-cert=<file>, -client-key=<file>
      PEM files of a client certificate and its key (dmsc tls cert
      create -client), for agents that require one. Default:
      $DMSC_CLIENT_CERT, $DMSC_CLIENT_KEY.

  -tls-server-name=<name>
      The name the agents' certificates must carry instead of the
      address dialed, e.g. server.dmsc. Default: $DMSC_TLS_SERVER_NAME.

  -json
      Print the API's JSON answer instead of a table. An error answer
      is printed as the API's JSON error envelope on stdout.`

// apiCommand holds what every API subcommand shares: the UI, the target
// and the output format.
type apiCommand struct {
	ui      cli.Ui
	address string
	token   string
	// namespace is -namespace: the namespace of allocation commands.
	namespace string
	json      bool
	tls       client.TLSConfig
}

// helpText assembles a subcommand's help: usage and description, its own
// options, then the shared options and the exit codes.
func helpText(usage, options string) string {
	parts := []string{strings.TrimSpace(usage)}
	if options = strings.TrimSpace(options); options != "" {
		parts = append(parts, "Options:\n\n  "+options)
	}
	parts = append(parts, apiOptionsHelp, exitCodesHelp)
	return strings.Join(parts, "\n\n")
}

// flags returns a flag set with the shared flags.
func (c *apiCommand) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.address, "address", os.Getenv(client.AddressEnv), "")
	fs.StringVar(&c.token, "token", os.Getenv(client.TokenEnv), "")
	fs.StringVar(&c.namespace, "namespace", os.Getenv(client.NamespaceEnv), "")
	fs.BoolVar(&c.json, "json", false, "")
	tlsFlags(fs, &c.tls)
	return fs
}

// tlsFlags adds the TLS flags of a command that talks to an agent, with
// their environment defaults.
func tlsFlags(fs *flag.FlagSet, t *client.TLSConfig) {
	fs.StringVar(&t.CACert, "ca-cert", os.Getenv(client.CACertEnv), "")
	fs.StringVar(&t.ClientCert, "client-cert", os.Getenv(client.ClientCertEnv), "")
	fs.StringVar(&t.ClientKey, "client-key", os.Getenv(client.ClientKeyEnv), "")
	fs.StringVar(&t.ServerName, "tls-server-name", os.Getenv(client.TLSServerNameEnv), "")
}

// tlsOrNil is t, or nil when no TLS option is set.
func tlsOrNil(t client.TLSConfig) *client.TLSConfig {
	if t == (client.TLSConfig{}) {
		return nil
	}
	return &t
}

// parse parses args and checks the number of positional arguments;
// names are their names for the error message. It returns the positional
// arguments, or ok false after printing the usage error.
//
// Flags may come before or after the positional arguments
// ("dmsc renew ID -ttl 1h"); after "--" everything is positional.
func (c *apiCommand) parse(fs *flag.FlagSet, args []string, names ...string) (pos []string, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			c.ui.Error(err.Error())
			c.ui.Error(fmt.Sprintf("Run 'dmsc %s -h' for usage.", fs.Name()))
			return nil, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if len(pos) != len(names) {
		want := "no arguments"
		if len(names) > 0 {
			want = strings.Join(names, " ")
		}
		c.ui.Error(fmt.Sprintf("dmsc %s takes %s; got %d argument(s)", fs.Name(), want, len(pos)))
		c.ui.Error(fmt.Sprintf("Run 'dmsc %s -h' for usage.", fs.Name()))
		return nil, false
	}
	return pos, true
}

// usageError prints a usage error and returns exitUsage.
func (c *apiCommand) usageError(name, format string, args ...any) int {
	c.ui.Error(fmt.Sprintf(format, args...))
	c.ui.Error(fmt.Sprintf("Run 'dmsc %s -h' for usage.", name))
	return exitUsage
}

// client returns an API client for -address.
func (c *apiCommand) client() (*client.Client, error) {
	// A few quick retries ride out a leader election; a node that is not
	// there fails the command within seconds.
	return client.New(client.Config{Addresses: splitAddresses(c.address), Token: c.token, Namespace: c.namespace, TLS: tlsOrNil(c.tls), MaxRetries: 5, RetryWaitMax: time.Second})
}

// context ends on Ctrl-C, so that a waiting request can be abandoned.
func commandContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}

// run is the common body of an API subcommand: it makes the client and
// the context, calls fn, and turns its error into a message and an exit
// code.
func (c *apiCommand) run(fn func(ctx context.Context, cl *client.Client) error) int {
	cl, err := c.client()
	if err != nil {
		c.ui.Error(err.Error())
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	if err := fn(ctx, cl); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// fail prints an error and returns its exit code.
func (c *apiCommand) fail(err error) int {
	var ae *client.APIError
	if c.json && errors.As(err, &ae) {
		c.printJSON(wire.ErrorResponse{Error: wire.Error{
			Code: ae.Code, Message: ae.Message, Retryable: ae.Retryable, WhyNot: ae.WhyNot,
			AllocationID: ae.AllocationID, RequestID: ae.RequestID,
		}})
		return exitCode(err)
	}
	if errors.As(err, &ae) && (ae.Code == client.ErrNoCapacity.Code || ae.Code == client.ErrQuotaExceeded.Code) {
		switch {
		case ae.WhyNot == nil:
			c.ui.Error("Refused: " + ae.Message)
		case ae.WhyNot.Quota != "":
			c.ui.Error("Refused: " + ae.WhyNot.Quota + ".")
		default:
			c.ui.Error("Refused: no device fits the request.")
		}
		if ae.AllocationID != "" {
			c.ui.Error("The request is kept in the history as allocation " + ae.AllocationID + ".")
		}
		if ae.WhyNot != nil {
			c.ui.Error("")
			c.ui.Error(strings.TrimRight(formatWhyNot(ae.WhyNot), "\n"))
		}
		return exitCapacity
	}
	c.ui.Error("Error: " + err.Error())
	return exitCode(err)
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, client.ErrNoCapacity), errors.Is(err, client.ErrQuotaExceeded):
		return exitCapacity
	case errors.Is(err, client.ErrNotFound):
		return exitNotFound
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrPermissionDenied):
		return exitDenied
	case errors.Is(err, client.ErrConflict), errors.Is(err, client.ErrNotActive), errors.Is(err, client.ErrRequestIDReused):
		return exitConflict
	case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrBadRequest),
		errors.Is(err, client.ErrBadSnapshot), errors.Is(err, client.ErrTooLarge):
		return exitUsage
	}
	return exitError
}

// printJSON prints v as indented JSON.
func (c *apiCommand) printJSON(v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		c.ui.Error("Error: " + err.Error())
		return
	}
	c.ui.Output(string(b))
}

// output prints text without its trailing newlines (the UI adds one).
func (c *apiCommand) output(s string) {
	c.ui.Output(strings.TrimRight(s, "\n"))
}

// table formats rows under a header, aligned in columns.
func table(header []string, rows [][]string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
	return b.String()
}

// keyValues formats "Key = value" lines, aligned.
func keyValues(pairs [][2]string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	for _, p := range pairs {
		fmt.Fprintf(tw, "%s\t= %s\n", p[0], p[1])
	}
	tw.Flush()
	return b.String()
}

// kvFlag is a repeatable key=value flag.
type kvFlag map[string]string

func (f kvFlag) String() string { return formatMap(f) }

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	f[k] = v
	return nil
}

// formatMap prints a map as sorted k=v pairs, "-" when empty.
func formatMap(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ",")
}

// nameIn returns the name in list that s is in any case ("gpu" is GPU),
// or s itself when none is.
func nameIn[S ~string](list []S, s string) S {
	for _, n := range list {
		if strings.EqualFold(string(n), s) {
			return n
		}
	}
	return S(s)
}

// deviceType accepts a type in any case ("gpu") and returns its name.
func deviceType(s string) client.DeviceType { return nameIn(wire.DeviceTypes, s) }

// policyName accepts a policy in any case ("bestfit").
func policyName(s string) client.Policy { return nameIn(wire.KnownPolicies, s) }

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatTime prints a time in UTC to the second, "-" when unset.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// formatNum prints a number without needless decimals.
func formatNum(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".")
}

// formatPct prints a 0..1 share as a percentage.
func formatPct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }

// formatSeconds prints seconds as a rounded duration.
func formatSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// formatResources prints the non-zero dimensions of r as "memory_gb=16,...".
func formatResources(r client.Resources, op string) string {
	var parts []string
	for _, d := range []struct {
		name string
		v    float64
	}{{"memory_gb", r.MemoryGB}, {"compute_units", r.ComputeUnits}, {"storage_gb", r.StorageGB}, {"bandwidth_gbps", r.BandwidthGbps}} {
		if d.v != 0 {
			parts = append(parts, d.name+op+formatNum(d.v))
		}
	}
	return strings.Join(parts, ",")
}

// formatWhyNot explains a refusal: what each filter removed, per claim.
func formatWhyNot(w *client.WhyNot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Why not: %s\n", w.Summary)
	fmt.Fprintf(&b, "  %d devices on %d hosts were considered.\n", w.Devices, w.Hosts)
	for _, cl := range w.Claims {
		fmt.Fprintf(&b, "\n  Claim %d (%d x %s): %d devices fit; %d hosts have some, %d have enough\n",
			cl.Claim, cl.Count, cl.Type, cl.Fitting, cl.HostsWithSome, cl.HostsWithEnough)
		if len(cl.Removed) == 0 {
			continue
		}
		rows := make([][]string, len(cl.Removed))
		for i, r := range cl.Removed {
			rows[i] = []string{fmt.Sprint(r.Count), r.Reason}
		}
		indentTable(&b, []string{"REMOVED", "BECAUSE"}, rows)
	}
	if w.HostsRejected > 0 {
		fmt.Fprintf(&b, "\n  %d hosts had devices for each claim alone, but not for all claims together.\n", w.HostsRejected)
	}
	if g := w.Gang; g != nil {
		fmt.Fprintf(&b, "\n  Gang: %d devices over at most %d hosts, at least %d each; %d hosts could take a part.\n",
			g.Count, g.MaxHosts, g.MinPerHost, g.HostsAble)
		if len(g.Best) > 0 {
			rows := make([][]string, len(g.Best))
			for i, h := range g.Best {
				rows[i] = []string{h.Host, fmt.Sprint(h.Take)}
			}
			fmt.Fprintf(&b, "  The best %d hosts could take %d of %d:\n", len(g.Best), g.BestTotal, g.Count)
			indentTable(&b, []string{"HOST", "COULD TAKE"}, rows)
		}
		if len(g.Domains) > 0 {
			rows := make([][]string, len(g.Domains))
			for i, d := range g.Domains {
				rows[i] = []string{d.Value, fmt.Sprint(d.HostsAble), fmt.Sprint(d.Total)}
			}
			fmt.Fprintf(&b, "  By %s (%d hosts without the label):\n", g.Same, g.HostsUnlabelled)
			indentTable(&b, []string{strings.ToUpper(g.Same), "HOSTS ABLE", "COULD TAKE"}, rows)
		}
	}
	return b.String()
}

// indentTable writes a table indented under a why-not's line.
func indentTable(b *strings.Builder, header []string, rows [][]string) {
	for _, line := range strings.Split(strings.TrimRight(table(header, rows), "\n"), "\n") {
		b.WriteString("    " + line + "\n")
	}
}

// parentCommand is a command that only groups subcommands (dmsc device,
// dmsc operator, ...).
type parentCommand struct {
	ui       cli.Ui
	name     string
	synopsis string
	subs     []string
}

func (c *parentCommand) Synopsis() string { return c.synopsis }

func (c *parentCommand) Help() string {
	return fmt.Sprintf("Usage: dmsc %s <subcommand> [options] [args]\n\n  %s. Run 'dmsc %s <subcommand> -h' for the\n  options of each.", c.name, c.synopsis, c.name)
}

func (c *parentCommand) Run(args []string) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c.ui.Error(fmt.Sprintf("dmsc %s: unknown subcommand %q", c.name, args[0]))
	}
	c.ui.Error(c.Help())
	c.ui.Error("\nSubcommands: " + strings.Join(c.subs, ", "))
	return exitUsage
}
