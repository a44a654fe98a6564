package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
)

// aclCommands are `dmsc acl ...`: bootstrap, policies and tokens.
func aclCommands(ui cli.Ui) map[string]cli.CommandFactory {
	base := func() apiCommand { return apiCommand{ui: ui} }
	parent := func(name, synopsis string, subs ...string) cli.CommandFactory {
		return func() (cli.Command, error) {
			return &parentCommand{ui: ui, name: name, synopsis: synopsis, subs: subs}, nil
		}
	}
	return map[string]cli.CommandFactory{
		"acl":              parent("acl", "Manage ACLs: the bootstrap token, policies and tokens", "bootstrap", "policy", "token"),
		"acl bootstrap":    func() (cli.Command, error) { return &aclBootstrapCommand{base()}, nil },
		"acl policy":       parent("acl policy", "Manage ACL policies", "apply", "list", "read", "delete"),
		"acl policy apply": func() (cli.Command, error) { return &aclPolicyApplyCommand{base()}, nil },
		"acl policy list":  func() (cli.Command, error) { return &aclPolicyListCommand{base()}, nil },
		"acl policy read":  func() (cli.Command, error) { return &aclPolicyReadCommand{base()}, nil },
		"acl policy delete": func() (cli.Command, error) {
			return &aclPolicyDeleteCommand{base()}, nil
		},
		"acl token":        parent("acl token", "Manage ACL tokens", "create", "update", "list", "read", "self", "delete"),
		"acl token create": func() (cli.Command, error) { return &aclTokenCreateCommand{base(), false}, nil },
		"acl token update": func() (cli.Command, error) { return &aclTokenCreateCommand{base(), true}, nil },
		"acl token list":   func() (cli.Command, error) { return &aclTokenListCommand{base()}, nil },
		"acl token read":   func() (cli.Command, error) { return &aclTokenReadCommand{base(), false}, nil },
		"acl token self":   func() (cli.Command, error) { return &aclTokenReadCommand{base(), true}, nil },
		"acl token delete": func() (cli.Command, error) { return &aclTokenDeleteCommand{base()}, nil },
	}
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// formatToken prints a token as key: value lines.
func formatToken(t *client.ACLToken) string {
	rows := [][2]string{{"AccessorID", t.AccessorID}}
	if t.SecretID != "" {
		rows = append(rows, [2]string{"SecretID", t.SecretID})
	}
	rows = append(rows,
		[2]string{"Description", t.Description},
		[2]string{"Policies", strings.Join(t.Policies, ", ")},
		[2]string{"Management", fmt.Sprint(t.Management)},
	)
	if t.ExpiresAt != nil {
		rows = append(rows, [2]string{"Expires", t.ExpiresAt.UTC().Format(time.RFC3339)})
	}
	rows = append(rows, [2]string{"Created", t.CreateTime.UTC().Format(time.RFC3339)})
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-12s %s\n", r[0]+":", r[1])
	}
	return b.String()
}

// aclBootstrapCommand is `dmsc acl bootstrap`.
type aclBootstrapCommand struct{ apiCommand }

func (c *aclBootstrapCommand) Synopsis() string { return "Create the cluster's management token, once" }

func (c *aclBootstrapCommand) Help() string {
	return helpText(`
Usage: dmsc acl bootstrap [options]

  Creates the one management token of a cluster whose agents run with
  ACLs on (acl { enabled = true }, -acl-enabled), and prints it. The
  secret ID is shown only now: keep it, and use it as DMSC_TOKEN (or
  -token) to create policies and tokens. A second bootstrap is refused
  (exit 5). With -json, prints an object with accessor_id and secret_id.`, "")
}

func (c *aclBootstrapCommand) Run(args []string) int {
	fs := c.flags("acl bootstrap")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		t, err := cl.ACLBootstrap(ctx)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(t)
			return nil
		}
		c.output(formatToken(t))
		return nil
	})
}

// aclPolicyApplyCommand is `dmsc acl policy apply`.
type aclPolicyApplyCommand struct{ apiCommand }

func (c *aclPolicyApplyCommand) Synopsis() string { return "Create or replace an ACL policy" }

func (c *aclPolicyApplyCommand) Help() string {
	return helpText(`
Usage: dmsc acl policy apply [options] -name NAME <rules file, or - for stdin>

  Creates or replaces a policy. The rules are JSON:

      {
        "namespaces": { "team-a": "write", "*": "read" },
        "devices": "read",
        "policies": "read",
        "operator": "",
        "agent": "read",
        "host_register": ["gpu-node-1"]
      }

  Each access is read, write (read included), deny (wins over every
  other policy of a token) or empty. namespaces grants allocations, the
  queue, the history, statistics and recommendations per namespace ("*":
  any namespace not named); devices covers devices and hosts; policies
  placement policies and pools; operator Raft peers, snapshots,
  retention, the gossip keyring and ACLs; agent /v1/agent/self, /metrics
  and pprof; host_register the hosts a host agent's token may register.`, `
-name=<name>
      The policy's name (letters, digits, '-', '_', '.'). Required.

  -description=<text>
      What the policy is for.`)
}

func (c *aclPolicyApplyCommand) Run(args []string) int {
	fs := c.flags("acl policy apply")
	name := fs.String("name", "", "")
	desc := fs.String("description", "", "")
	pos, ok := c.parse(fs, args, "RULES")
	if !ok {
		return exitUsage
	}
	if *name == "" {
		return c.usageError("acl policy apply", "-name is required")
	}
	var data []byte
	var err error
	if pos[0] == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	} else {
		data, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return c.usageError("acl policy apply", "rules: %v", err)
	}
	var rules client.ACLRules
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rules); err != nil {
		return c.usageError("acl policy apply", "rules are not valid JSON: %v", err)
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		p, err := cl.ACLPolicyApply(ctx, *name, *desc, rules)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(p)
			return nil
		}
		c.ui.Output("Applied policy " + p.Name)
		return nil
	})
}

// aclPolicyListCommand is `dmsc acl policy list`.
type aclPolicyListCommand struct{ apiCommand }

func (c *aclPolicyListCommand) Synopsis() string { return "List the ACL policies" }

func (c *aclPolicyListCommand) Help() string {
	return helpText(`
Usage: dmsc acl policy list [options]

  Lists the policies with their descriptions.`, "")
}

func (c *aclPolicyListCommand) Run(args []string) int {
	fs := c.flags("acl policy list")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		list, _, err := cl.ACLPolicyList(ctx, nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(list)
			return nil
		}
		rows := make([][]string, 0, len(list))
		for _, p := range list {
			rows = append(rows, []string{p.Name, p.Description})
		}
		c.output(table([]string{"NAME", "DESCRIPTION"}, rows))
		return nil
	})
}

// aclPolicyReadCommand is `dmsc acl policy read`.
type aclPolicyReadCommand struct{ apiCommand }

func (c *aclPolicyReadCommand) Synopsis() string { return "Show an ACL policy" }

func (c *aclPolicyReadCommand) Help() string {
	return helpText(`
Usage: dmsc acl policy read [options] NAME

  Shows a policy and its rules.`, "")
}

func (c *aclPolicyReadCommand) Run(args []string) int {
	fs := c.flags("acl policy read")
	pos, ok := c.parse(fs, args, "NAME")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		p, _, err := cl.ACLPolicyRead(ctx, pos[0], nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(p)
			return nil
		}
		rules, _ := json.MarshalIndent(p.Rules, "", "  ")
		c.output(fmt.Sprintf("Name:        %s\nDescription: %s\nRules:\n%s", p.Name, p.Description, rules))
		return nil
	})
}

// aclPolicyDeleteCommand is `dmsc acl policy delete`.
type aclPolicyDeleteCommand struct{ apiCommand }

func (c *aclPolicyDeleteCommand) Synopsis() string { return "Delete an ACL policy" }

func (c *aclPolicyDeleteCommand) Help() string {
	return helpText(`
Usage: dmsc acl policy delete [options] NAME

  Deletes a policy; tokens that named it lose what it granted.`, "")
}

func (c *aclPolicyDeleteCommand) Run(args []string) int {
	fs := c.flags("acl policy delete")
	pos, ok := c.parse(fs, args, "NAME")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.ACLPolicyDelete(ctx, pos[0]); err != nil {
			return err
		}
		c.ui.Output("Deleted policy " + pos[0])
		return nil
	})
}

// aclTokenCreateCommand is `dmsc acl token create` and, with update,
// `dmsc acl token update ACCESSOR`.
type aclTokenCreateCommand struct {
	apiCommand
	update bool
}

func (c *aclTokenCreateCommand) Synopsis() string {
	if c.update {
		return "Replace an ACL token's policies and description"
	}
	return "Create an ACL token"
}

func (c *aclTokenCreateCommand) Help() string {
	if c.update {
		return helpText(`
Usage: dmsc acl token update [options] ACCESSOR

  Replaces a token's policies and description; its secret and expiry
  stay. ACCESSOR "anonymous" is the token of requests without one: its
  policies say what anyone may do, e.g.

      dmsc acl token update -policy read-devices anonymous`, `
-policy=<name>
      A policy of the token; repeat or separate with commas. None leaves
      the token without any.

  -description=<text>
      What the token is for.`)
	}
	return helpText(`
Usage: dmsc acl token create [options]

  Creates a token with policies and prints it. The secret ID is shown
  only now; its holder uses it as DMSC_TOKEN or -token. With -json,
  prints the token as an object (accessor_id, secret_id, ...).

  The secret is random unless -secret or -secret-file gives it: a host
  agent can be started with a secret of its own (acl { token_file })
  before the cluster is bootstrapped, and its token is created with that
  secret afterwards; the leader registers the host once the token is
  there. For example:

      dmsc acl token create -description "host gpu-node-1" \
          -policy host-gpu-node-1 -secret-file gpu-node-1.token`, `
-policy=<name>
      A policy of the token; repeat or separate with commas.

  -description=<text>
      What the token is for.

  -ttl=<duration>
      The token ends this long after it is made, e.g. 24h. Default:
      never.

  -secret=<secret>
      The token's secret: 16 to 128 printable ASCII characters without
      spaces, e.g. a UUID. A secret another token has is refused (exit
      5). Prefer -secret-file: a command line is seen by other users of
      the machine and kept in shell history.

  -secret-file=<path>
      Read the token's secret from a file (leading and trailing white
      space, such as the final newline, is dropped).`)
}

func (c *aclTokenCreateCommand) Run(args []string) int {
	name := "acl token create"
	var names []string
	if c.update {
		name, names = "acl token update", []string{"ACCESSOR"}
	}
	fs := c.flags(name)
	var policies listFlag
	fs.Var(&policies, "policy", "")
	desc := fs.String("description", "", "")
	var (
		ttl                time.Duration
		secret, secretFile string
	)
	if !c.update {
		fs.DurationVar(&ttl, "ttl", 0, "")
		fs.StringVar(&secret, "secret", "", "")
		fs.StringVar(&secretFile, "secret-file", "", "")
	}
	pos, ok := c.parse(fs, args, names...)
	if !ok {
		return exitUsage
	}
	if ttl < 0 {
		return c.usageError(name, "-ttl must not be negative")
	}
	if secretFile != "" {
		if secret != "" {
			return c.usageError(name, "-secret and -secret-file exclude each other")
		}
		var err error
		if secret, err = readSecretFile(secretFile); err != nil {
			return c.usageError(name, "-secret-file: %v", err)
		}
	}
	if secret != "" && !client.ValidACLSecret(secret) {
		return c.usageError(name, "the secret is not %d to %d printable ASCII characters without spaces", client.ACLSecretMinLength, client.ACLSecretMaxLength)
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		spec := client.ACLTokenSpec{Description: *desc, Policies: policies, TTL: ttl, SecretID: secret}
		var (
			t   *client.ACLToken
			err error
		)
		if c.update {
			t, err = cl.ACLTokenUpdate(ctx, pos[0], spec)
		} else {
			t, err = cl.ACLTokenCreate(ctx, spec)
		}
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(t)
			return nil
		}
		c.output(formatToken(t))
		return nil
	})
}

// readSecretFile reads a token secret from a file of at most a few KiB,
// without its surrounding white space.
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 4<<10+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > 4<<10 {
		return "", fmt.Errorf("%s is larger than 4 KiB", path)
	}
	s := strings.TrimSpace(string(data))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// aclTokenListCommand is `dmsc acl token list`.
type aclTokenListCommand struct{ apiCommand }

func (c *aclTokenListCommand) Synopsis() string { return "List the ACL tokens" }

func (c *aclTokenListCommand) Help() string {
	return helpText(`
Usage: dmsc acl token list [options]

  Lists the tokens (never their secrets), the anonymous one included.`, "")
}

func (c *aclTokenListCommand) Run(args []string) int {
	fs := c.flags("acl token list")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		list, _, err := cl.ACLTokenList(ctx, nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(list)
			return nil
		}
		rows := make([][]string, 0, len(list))
		for _, t := range list {
			expires := "-"
			if t.ExpiresAt != nil {
				expires = t.ExpiresAt.UTC().Format(time.RFC3339)
			}
			pol := strings.Join(t.Policies, ",")
			if t.Management {
				pol = "(management)"
			}
			rows = append(rows, []string{t.AccessorID, pol, expires, t.Description})
		}
		c.output(table([]string{"ACCESSOR", "POLICIES", "EXPIRES", "DESCRIPTION"}, rows))
		return nil
	})
}

// aclTokenReadCommand is `dmsc acl token read ACCESSOR` and, with self,
// `dmsc acl token self`.
type aclTokenReadCommand struct {
	apiCommand
	self bool
}

func (c *aclTokenReadCommand) Synopsis() string {
	if c.self {
		return "Show the token in use"
	}
	return "Show an ACL token"
}

func (c *aclTokenReadCommand) Help() string {
	if c.self {
		return helpText(`
Usage: dmsc acl token self [options]

  Shows the token the command runs with (-token, DMSC_TOKEN; the
  anonymous token without one), without its secret.`, "")
	}
	return helpText(`
Usage: dmsc acl token read [options] ACCESSOR

  Shows a token, without its secret.`, "")
}

func (c *aclTokenReadCommand) Run(args []string) int {
	name, names := "acl token read", []string{"ACCESSOR"}
	if c.self {
		name, names = "acl token self", nil
	}
	fs := c.flags(name)
	pos, ok := c.parse(fs, args, names...)
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		var (
			t   *client.ACLToken
			err error
		)
		if c.self {
			t, _, err = cl.ACLTokenSelf(ctx, nil)
		} else {
			t, _, err = cl.ACLTokenRead(ctx, pos[0], nil)
		}
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(t)
			return nil
		}
		c.output(formatToken(t))
		return nil
	})
}

// aclTokenDeleteCommand is `dmsc acl token delete`.
type aclTokenDeleteCommand struct{ apiCommand }

func (c *aclTokenDeleteCommand) Synopsis() string { return "Delete an ACL token" }

func (c *aclTokenDeleteCommand) Help() string {
	return helpText(`
Usage: dmsc acl token delete [options] ACCESSOR

  Deletes a token; its secret stops working at once.`, "")
}

func (c *aclTokenDeleteCommand) Run(args []string) int {
	fs := c.flags("acl token delete")
	pos, ok := c.parse(fs, args, "ACCESSOR")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.ACLTokenDelete(ctx, pos[0]); err != nil {
			return err
		}
		c.ui.Output("Deleted token " + pos[0])
		return nil
	})
}
