package agentconfig

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/certs"
)

type (
	fsmHost    = fsm.HostSpec
	fsmDevices = []fsm.DeviceSpec
)

// env is a fake environment.
type env map[string]string

func (e env) get(k string) string { return e[k] }

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const serverHCL = `
node_name = "from-file"
data_dir  = "/var/lib/dmsc"
http_addr = "0.0.0.0:4646"
join      = ["10.0.0.1", "10.0.0.2:5000"]
ports {
  rpc = 7001
}
server {
  enabled          = true
  bootstrap_expect = 3
  host_down_grace  = "45s"
}
host {
  labels = { rack = "r1", zone = "a" }
}
`

func TestPrecedenceFileEnvFlags(t *testing.T) {
	file := writeFile(t, "server.hcl", serverHCL)
	cases := []struct {
		name  string
		args  []string
		env   env
		check func(t *testing.T, c *Config)
	}{
		{
			name: "file only",
			args: []string{"-config", file},
			check: func(t *testing.T, c *Config) {
				want := []string{"10.0.0.1:4649", "10.0.0.2:5000"}
				if c.NodeName != "from-file" || c.DataDir != "/var/lib/dmsc" || !c.Server || c.BootstrapExpect != 3 ||
					c.RPCPort != 7001 || c.RaftPort != cluster.DefaultRaftPort || c.HostDownGrace != 45*time.Second ||
					!reflect.DeepEqual(c.Join, want) || c.HostLabels["rack"] != "r1" || c.HTTPAddr != "0.0.0.0:4646" {
					t.Fatalf("config = %+v", c)
				}
			},
		},
		{
			name: "env beats file",
			args: []string{"-config", file},
			env:  env{"DMSC_NODE_NAME": "from-env", "DMSC_BOOTSTRAP_EXPECT": "5", "DMSC_JOIN": "a:1, b:2", "DMSC_HOST_DOWN_GRACE": "1m"},
			check: func(t *testing.T, c *Config) {
				if c.NodeName != "from-env" || c.BootstrapExpect != 5 || !reflect.DeepEqual(c.Join, []string{"a:1", "b:2"}) ||
					c.HostDownGrace != time.Minute || c.DataDir != "/var/lib/dmsc" {
					t.Fatalf("config = %+v", c)
				}
			},
		},
		{
			name: "flags beat env and file; repeated list flags collect",
			args: []string{"-config", file, "-node", "from-flag", "-join", "x:1", "-join", "y:2,z", "-bootstrap-expect", "1", "-label", "rack=r9"},
			env:  env{"DMSC_NODE_NAME": "from-env", "DMSC_BOOTSTRAP_EXPECT": "5", "DMSC_JOIN": "a:1"},
			check: func(t *testing.T, c *Config) {
				if c.NodeName != "from-flag" || c.BootstrapExpect != 1 || !reflect.DeepEqual(c.Join, []string{"x:1", "y:2", "z:4649"}) ||
					!reflect.DeepEqual(c.HostLabels, map[string]string{"rack": "r9"}) {
					t.Fatalf("config = %+v", c)
				}
			},
		},
		{
			name: "bool flag false beats env true",
			args: []string{"-config", file, "-log-json=false"},
			env:  env{"DMSC_LOG_JSON": "true"},
			check: func(t *testing.T, c *Config) {
				if c.LogJSON {
					t.Fatal("log-json from env won over -log-json=false")
				}
			},
		},
		{
			name: "DMSC_CONFIG names the file when no -config",
			env:  env{"DMSC_CONFIG": file},
			check: func(t *testing.T, c *Config) {
				if c.NodeName != "from-file" || !reflect.DeepEqual(c.ConfigFiles, []string{file}) {
					t.Fatalf("config = %+v", c)
				}
			},
		},
		{
			name: "dev defaults, overridable",
			args: []string{"-dev", "-http-addr", "127.0.0.1:0"},
			check: func(t *testing.T, c *Config) {
				if !c.Dev || !c.Server || c.BootstrapExpect != 1 || c.BindAddr != "127.0.0.1" || c.RaftPort != 0 ||
					c.HTTPAddr != "127.0.0.1:0" || c.NodeName != "dev" {
					t.Fatalf("config = %+v", c)
				}
			},
		},
		{
			// The newcomer's one command: everything on loopback, plain
			// HTTP, no gossip key; the deploy/ examples turn it all on.
			name: "dev alone is loopback, plain HTTP",
			args: []string{"-dev"},
			check: func(t *testing.T, c *Config) {
				if c.BindAddr != "127.0.0.1" || c.HTTPAddr != "127.0.0.1:4646" || c.TLSEnabled() || c.Encrypt != "" {
					t.Fatalf("config = %+v", c)
				}
				if err := c.Validate(); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "host with discovery",
			args: []string{"-host", "-join", "10.0.0.1", "-discover", "nvidia,cpu", "-node", "gpu-7"},
			check: func(t *testing.T, c *Config) {
				if !c.Host || c.Server || !reflect.DeepEqual(c.Discover, []string{"nvidia", "cpu"}) {
					t.Fatalf("config = %+v", c)
				}
				cc := c.ClusterConfig("", func() (_ fsmHost, _ fsmDevices, _ error) { return }, "v", nil)
				if cc.NodeID != "gpu-7" || cc.Server || cc.Inventory == nil || cc.Join[0] != "10.0.0.1:4649" {
					t.Fatalf("cluster config = %+v", cc)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env
			if e == nil {
				e = env{}
			}
			c, err := Load(tc.args, e.get)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestJSONConfigFile(t *testing.T) {
	file := writeFile(t, "server.json", `{
  "node_name": "json-node",
  "data_dir": "/data",
  "server": {"enabled": true, "bootstrap_expect": 3},
  "ports": {"gossip": 9000}
}`)
	c, err := Load([]string{"-config", file}, env{}.get)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "json-node" || c.BootstrapExpect != 3 || c.GossipPort != 9000 {
		t.Fatalf("config = %+v", c)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	server := []string{"-server", "-data-dir", "/d", "-bootstrap-expect", "3"}
	cases := []struct {
		name   string
		args   []string
		env    env
		errHas string
	}{
		{"no role", nil, nil, "choose a role"},
		{"server without data dir", []string{"-server", "-bootstrap-expect", "1"}, nil, "needs -data-dir"},
		{"server that can neither form nor join", []string{"-server", "-data-dir", "/d"}, nil, "needs -bootstrap-expect N to form"},
		{"bootstrap-expect too large", append(server, "-bootstrap-expect", "9"), nil, "bootstrap-expect is 9"},
		{"bootstrap-expect on a host", []string{"-host", "-join", "a", "-devices", "d.json", "-bootstrap-expect", "3"}, nil, "bootstrap-expect is for servers"},
		{"host without join", []string{"-host", "-devices", "d.json"}, nil, "needs -join"},
		{"host without inventory", []string{"-host", "-join", "a"}, nil, "needs -devices FILE or -discover"},
		{"unknown discover source", []string{"-host", "-join", "a", "-discover", "amd"}, nil, `discover source "amd" is unknown`},
		{"bad bind", append(server, "-bind", "localhost"), nil, `bind address "localhost" is not an IP`},
		{"bad http addr", append(server, "-http-addr", "4646"), nil, `http-addr "4646"`},
		{"same ports", append(server, "-rpc-port", "5000", "-raft-port", "5000"), nil, "are both 5000"},
		{"port range", append(server, "-gossip-port", "70000"), nil, "gossip-port is 70000"},
		{"bad level", append(server, "-log-level", "loud"), nil, `log level "loud" is unknown`},
		{"bad duration flag", append(server, "-host-down-grace", "soon"), nil, "-host-down-grace: \"soon\" is not a duration"},
		{"bad int env", server, env{"DMSC_RPC_PORT": "x"}, "environment DMSC_RPC_PORT: \"x\" is not a whole number"},
		{"bad bool env", server, env{"DMSC_LOG_JSON": "yes please"}, "environment DMSC_LOG_JSON"},
		{"bad label", append(server, "-label", "rack"), nil, `-label: "rack" is not key=value`},
		{"lease above heartbeat", append(server, "-heartbeat-timeout", "100ms", "-leader-lease-timeout", "1s"), nil, "exceeds heartbeat-timeout"},
		{"node name with space", append(server, "-node", "a b"), nil, "node name \"a b\""},
		{"unknown flag", []string{"-servr"}, nil, "flag provided but not defined: -servr"},
		{"stray argument", []string{"-server", "extra"}, nil, `unexpected argument "extra"`},
		{"missing config file", []string{"-config", filepath.Join(dir, "none.hcl")}, nil, "no such file"},
		{"unknown file key", []string{"-config", bad("k.hcl", "node = \"x\"\n")}, nil, `k.hcl:1,1: Unsupported argument: An argument named "node" is not expected here`},
		{"unknown block", []string{"-config", bad("b.hcl", "client {\n}\n")}, nil, `Unsupported block type`},
		{"wrong type in file", []string{"-config", bad("t.hcl", "server {\n  bootstrap_expect = \"three\"\n}\n")}, nil, "t.hcl:2,23: Unsuitable value type: Unsuitable value: a number is required"},
		{"bad duration in file", []string{"-config", bad("d.hcl", "server {\n  host_down_grace = \"3 days\"\n}\n")}, nil, "server.host_down_grace: \"3 days\" is not a duration"},
		{"syntax error", []string{"-config", bad("s.hcl", "server {\n")}, nil, "s.hcl:"},
		{"bad json", []string{"-config", bad("j.json", `{"server": {"enabled": tru}}`)}, nil, "j.json:1"},
		{"unknown json key", []string{"-config", bad("u.json", `{"servers": {}}`)}, nil, `No argument or block type is named "servers". Did you mean "server"?`},
		{"file too large", []string{"-config", bad("big.hcl", strings.Repeat("#", maxConfigFileBytes+1))}, nil, "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env
			if e == nil {
				e = env{}
			}
			_, err := Load(tc.args, e.get)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tc.errHas)
			}
		})
	}
}

func TestHelpIsNotAnError(t *testing.T) {
	if _, err := Load([]string{"-help"}, env{}.get); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
}

// Every file key has a setting and every setting a file key, a unique flag
// and a unique DMSC_ variable.
func TestSettingsCoverTheFileSchema(t *testing.T) {
	keys := fileKeys(reflect.TypeOf(fileConfig{}), "")
	var settingKeys []string
	flags, envs := map[string]bool{}, map[string]bool{}
	for _, s := range Settings {
		settingKeys = append(settingKeys, s.File)
		if flags[s.Flag] || envs[s.Env] || !strings.HasPrefix(s.Env, "DMSC_") {
			t.Errorf("setting %+v repeats a flag or env name, or its env lacks DMSC_", s.Flag)
		}
		flags[s.Flag], envs[s.Env] = true, true
		if s.set(&Config{}, []string{}) != nil {
			t.Errorf("setting %s: empty set fails", s.Flag)
		}
	}
	sort.Strings(keys)
	sort.Strings(settingKeys)
	if !reflect.DeepEqual(keys, settingKeys) {
		t.Fatalf("file keys %v\nsettings  %v", keys, settingKeys)
	}
	for _, s := range Settings {
		if !strings.Contains(Usage(), "-"+s.Flag) {
			t.Errorf("usage lacks -%s", s.Flag)
		}
	}
}

// deployTLSFiles is where deploy/ puts an agent's TLS files: the install
// steps of deploy/README.md and systemd/dmsc.service, and dmsc.env.
var deployTLSFiles = certs.Files{
	CA:   "/etc/dmsc/tls/dmsc-agent-ca.pem",
	Cert: "/etc/dmsc/tls/agent.pem",
	Key:  "/etc/dmsc/tls/agent-key.pem",
}

// deployACLTokenFile is where deploy/ puts a host's ACL token secret.
const deployACLTokenFile = "/etc/dmsc/acl/token"

// The example configs of deploy/ load, the cluster takes them, and they
// run secured: TLS on with every check on, from the files the install
// steps put in place, ACLs on (a host with its token from a file), and,
// under the systemd unit (its environment file systemd/dmsc.env over the
// config file), with a gossip key and a keyring that survives restarts.
func TestDeployExamplesLoad(t *testing.T) {
	unitEnv := deployEnvFile(t)
	key, err := cluster.GenerateGossipKey()
	if err != nil {
		t.Fatal(err)
	}
	// The token file the examples name is not on this machine: a flag
	// (which beats the file) points at a stand-in.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("host-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"server.hcl", "host.hcl", "server.json"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "..", "deploy", name)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			isHost := strings.Contains(string(src), "token_file")
			var extra []string
			if isHost {
				if !strings.Contains(string(src), `token_file = "`+deployACLTokenFile+`"`) {
					t.Errorf("%s: the token file is not %s", name, deployACLTokenFile)
				}
				extra = []string{"-acl-token-file", tokenFile}
			}
			c, err := Load(append([]string{"-config", path}, extra...), env{}.get)
			if err != nil {
				t.Fatal(err)
			}
			if !c.ACLEnabled {
				t.Errorf("%s leaves ACLs off", name)
			}
			if c.Host != isHost || (isHost && c.ACLToken != "host-0123456789abcdef") {
				t.Errorf("%s: host %t, token %q: a host reads its token from a file, a server has none", name, c.Host, c.ACLToken)
			}
			if c.ACLToken != "" && strings.Contains(string(src), c.ACLToken) {
				t.Errorf("%s holds a token secret", name)
			}
			cc := c.ClusterConfig(c.DataDir, func() (_ fsmHost, _ fsmDevices, _ error) { return }, "test", nil)
			cc.AdvertiseAddr = "10.0.0.9" // the examples leave it to the machine's private IP
			if _, err := cluster.New(cc); err != nil {
				t.Fatalf("cluster refuses %s: %v", name, err)
			}
			if !c.TLSEnabled() || c.TLSFiles() != deployTLSFiles {
				t.Errorf("TLS files %+v, want %+v", c.TLSFiles(), deployTLSFiles)
			}
			if !c.TLSVerifyIncoming || !c.TLSVerifyServerHostname || !c.TLSVerifyHTTPSClient {
				t.Errorf("verify_incoming %t, verify_server_hostname %t, verify_https_client %t: want all on",
					c.TLSVerifyIncoming, c.TLSVerifyServerHostname, c.TLSVerifyHTTPSClient)
			}
			if c.Encrypt != "" {
				t.Errorf("%s holds a gossip key; it belongs in the 0600 environment file", name)
			}

			// As the unit runs it, with a real key in place of the
			// environment file's placeholder.
			e := env{}
			for k, v := range unitEnv {
				e[k] = v
			}
			e["DMSC_CONFIG"], e["DMSC_ENCRYPT"] = path, key
			if isHost {
				e["DMSC_ACL_TOKEN_FILE"] = tokenFile
			}
			u, err := Load(nil, e.get)
			if err != nil {
				t.Fatal(err)
			}
			if u.Encrypt != key {
				t.Errorf("under the unit, encrypt = %q, want the environment file's key", u.Encrypt)
			}
			if u.TLSFiles() != deployTLSFiles || !u.TLSVerifyHTTPSClient {
				t.Errorf("under the unit, TLS files %+v, verify_https_client %t", u.TLSFiles(), u.TLSVerifyHTTPSClient)
			}
			if !u.ACLEnabled || u.ACLToken != c.ACLToken {
				t.Errorf("under the unit, ACLs on %t, token %q", u.ACLEnabled, u.ACLToken)
			}
			if u.KeyringFile == "" && u.DataDir == "" {
				t.Errorf("no keyring_file and no data_dir: a rotated gossip key would not survive a restart")
			}
		})
	}
}

// The systemd unit's environment file sets, and names in its commented
// lines, only variables the agent knows; it sets the gossip key and the
// TLS files; and it fails closed: until its placeholder gossip key is
// replaced, the agent refuses to start.
func TestDeploySystemdEnv(t *testing.T) {
	known := map[string]bool{"DMSC_CONFIG": true}
	for _, s := range Settings {
		known[s.Env] = true
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "dmsc.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, _, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "#"), "=")
		if ok && strings.HasPrefix(name, "DMSC_") && !strings.Contains(name, " ") && !known[name] {
			t.Errorf("dmsc.env names %s, which is no agent setting", name)
		}
	}
	unitEnv := deployEnvFile(t)
	for _, k := range []string{"DMSC_CONFIG", "DMSC_ENCRYPT", "DMSC_TLS_CA_FILE", "DMSC_TLS_CERT_FILE", "DMSC_TLS_KEY_FILE", "DMSC_ACL_ENABLED"} {
		if unitEnv[k] == "" {
			t.Errorf("dmsc.env does not set %s", k)
		}
	}
	if got := (certs.Files{CA: unitEnv["DMSC_TLS_CA_FILE"], Cert: unitEnv["DMSC_TLS_CERT_FILE"], Key: unitEnv["DMSC_TLS_KEY_FILE"]}); got != deployTLSFiles {
		t.Errorf("dmsc.env's TLS files %+v, want %+v", got, deployTLSFiles)
	}
	e := env{}
	for k, v := range unitEnv {
		e[k] = v
	}
	e["DMSC_CONFIG"] = filepath.Join("..", "..", "deploy", "server.hcl")
	if _, err := Load(nil, e.get); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "gossip key") {
		t.Fatalf("with the placeholder gossip key, Load = %v; want the key refused", err)
	}
}

// deployEnvFile is what deploy/systemd/dmsc.env sets, as systemd reads it
// (KEY=VALUE lines; blank and # lines skipped).
func deployEnvFile(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "dmsc.env"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("dmsc.env line %d is not KEY=VALUE: %q", i+1, line)
		}
		vars[k] = v
	}
	return vars
}

// fileKeys lists every key the file schema knows.
func fileKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, kind, _ := strings.Cut(t.Field(i).Tag.Get("hcl"), ",")
		if kind == "block" {
			out = append(out, fileKeys(t.Field(i).Type.Elem(), prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

func TestACLTokenFile(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "host.token")
	if err := os.WriteFile(tokenFile, []byte("host-1-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host := []string{"-host", "-devices", "d.json", "-join", "10.0.0.1"}
	// The file key, the flag and the environment all name the file; the
	// token is its content without the final newline.
	cfgFile := writeFile(t, "host.hcl", "acl {\n  enabled    = true\n  token_file = \""+tokenFile+"\"\n}\n")
	for name, tc := range map[string]struct {
		args []string
		env  env
	}{
		"file": {args: append([]string{"-config", cfgFile}, host...)},
		"flag": {args: append([]string{"-acl-enabled", "-acl-token-file", tokenFile}, host...)},
		"env":  {args: host, env: env{"DMSC_ACL_ENABLED": "true", "DMSC_ACL_TOKEN_FILE": tokenFile}},
	} {
		c, err := Load(tc.args, tc.env.get)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !c.ACLEnabled || c.ACLToken != "host-1-0123456789abcdef" || c.ACLTokenFile != tokenFile {
			t.Errorf("%s: enabled %t, token %q, file %q", name, c.ACLEnabled, c.ACLToken, c.ACLTokenFile)
		}
		if cc := c.ClusterConfig("", nil, "test", nil); cc.ACLToken != c.ACLToken {
			t.Errorf("%s: the cluster gets token %q", name, cc.ACLToken)
		}
	}
	empty := filepath.Join(dir, "empty.token")
	twoLines := filepath.Join(dir, "two.token")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(twoLines, []byte("first-0123456789abcdef\nsecond-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"missing":       {[]string{"-acl-token-file", filepath.Join(dir, "nosuch")}, "token_file"},
		"empty":         {[]string{"-acl-token-file", empty}, "is empty"},
		"two lines":     {[]string{"-acl-token-file", twoLines}, "more than one line"},
		"token as well": {[]string{"-acl-token-file", tokenFile, "-acl-token", "x"}, "exclude each other"},
	} {
		_, err := Load(append(tc.args, host...), env{}.get)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want ErrInvalid with %q, got %v", name, tc.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
}
