package agentconfig

import (
	"testing"
	"time"
)

// TestReconnectInterval: the reconnect interval is set by the config
// file, the environment and the flag (in that order of precedence) and
// reaches the cluster configuration.
func TestReconnectInterval(t *testing.T) {
	file := writeFile(t, "host.hcl", `reconnect_interval = "4s"`)
	base := []string{"-host", "-devices", "d.json", "-join", "10.0.0.1"}
	cases := []struct {
		name string
		args []string
		env  env
		want time.Duration
	}{
		{"default", nil, nil, 0},
		{"file", []string{"-config", file}, nil, 4 * time.Second},
		{"env beats file", []string{"-config", file}, env{"DMSC_RECONNECT_INTERVAL": "3s"}, 3 * time.Second},
		{"flag beats env", []string{"-config", file, "-reconnect-interval", "2s"}, env{"DMSC_RECONNECT_INTERVAL": "3s"}, 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(append(append([]string(nil), base...), tc.args...), tc.env.get)
			if err != nil {
				t.Fatal(err)
			}
			if c.ReconnectInterval != tc.want {
				t.Fatalf("ReconnectInterval = %v, want %v", c.ReconnectInterval, tc.want)
			}
			if got := c.ClusterConfig("", nil, "test", nil).ReconnectInterval; got != tc.want {
				t.Fatalf("cluster ReconnectInterval = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := Load(append(base, "-reconnect-interval", "-1s"), env{}.get); err == nil {
		t.Fatal("a negative reconnect interval was accepted")
	}
}
