package agentconfig

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/cluster"
)

// TestEncrypt: the gossip key comes from a flag, DMSC_ENCRYPT or the file
// key encrypt, reaches the cluster configuration decoded with the keyring
// file, and a key that is not base64 of 16, 24 or 32 bytes is refused with
// a message that names the setting.
func TestEncrypt(t *testing.T) {
	key, err := cluster.GenerateGossipKey()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := cluster.DecodeGossipKey(key)
	server := []string{"-server", "-data-dir", "/d", "-bootstrap-expect", "1"}
	file := writeFile(t, "gossip.hcl", "encrypt = \""+key+"\"\nkeyring_file = \"/etc/dmsc/keyring\"\n")
	for name, load := range map[string]func() (*Config, error){
		"flag": func() (*Config, error) {
			return Load(append(server, "-encrypt", key, "-keyring-file", "/etc/dmsc/keyring"), env{}.get)
		},
		"env": func() (*Config, error) {
			return Load(server, env{"DMSC_ENCRYPT": key, "DMSC_KEYRING_FILE": "/etc/dmsc/keyring"}.get)
		},
		"file": func() (*Config, error) { return Load(append(server, "-config", file), env{}.get) },
	} {
		c, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cc := c.ClusterConfig(c.DataDir, nil, "test", nil)
		if !bytes.Equal(cc.EncryptKey, raw) || cc.KeyringFile != "/etc/dmsc/keyring" {
			t.Errorf("%s: cluster config key %x, keyring file %q", name, cc.EncryptKey, cc.KeyringFile)
		}
	}
	c, err := Load(server, env{}.get)
	if err != nil {
		t.Fatal(err)
	}
	if cc := c.ClusterConfig(c.DataDir, nil, "test", nil); cc.EncryptKey != nil || cc.KeyringFile != "" {
		t.Errorf("no key: %x, %q", cc.EncryptKey, cc.KeyringFile)
	}
	for bad, want := range map[string]string{
		"not base64!":    "encrypt: gossip key is not base64",
		"c2hvcnQ=":       "encrypt: gossip key is 5 bytes; want 32",
		key[:len(key)-4]: "encrypt: gossip key is 30 bytes",
	} {
		_, err := Load(append(server, "-encrypt", bad), env{}.get)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("-encrypt %q: %v, want %q", bad, err, want)
		}
	}
}
