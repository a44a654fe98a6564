package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// Gossip encryption. With a key, memberlist encrypts and authenticates
// every gossip message with the keyring's primary key (AES-GCM) and drops
// any message that none of its keys opens, or that is not encrypted at
// all: a node without the key is neither seen nor heard. The keyring
// persists in a file (Config.KeyringFile, DataDir/keyring by default), so
// that keys rotated at run time survive a restart; that file wins over
// Config.EncryptKey. See DESIGN.md, "Gossip encryption".

// KeyringFileName is the keyring file's name in the data directory.
const KeyringFileName = "keyring"

// GossipKeySize is the size of the keys GenerateGossipKey makes (AES-256).
// Keys of 16 and 24 bytes (AES-128, AES-192) are accepted too.
const GossipKeySize = 32

// maxKeyringFile caps the keyring file read at start.
const maxKeyringFile = 64 << 10

// KeyringOp is an operation on the gossip keyring (Node.Keyring).
type KeyringOp string

// Keyring operations.
const (
	// KeyringList reports the keys every member holds.
	KeyringList KeyringOp = transport.KeyringList
	// KeyringInstall adds a key every member decrypts with.
	KeyringInstall KeyringOp = transport.KeyringInstall
	// KeyringUse makes an installed key the primary key, the one every
	// member encrypts with.
	KeyringUse KeyringOp = transport.KeyringUse
	// KeyringRemove drops a key that is no member's primary key.
	KeyringRemove KeyringOp = transport.KeyringRemove
)

// DecodeGossipKey reads a gossip encryption key: base64 of 16, 24 or 32
// bytes. The error is an fsm.ErrInvalid.
func DecodeGossipKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, &fsm.Error{Code: fsm.ErrInvalid.Code, Message: "gossip key is not base64: " + err.Error()}
	}
	if err := memberlist.ValidateKey(key); err != nil {
		return nil, &fsm.Error{Code: fsm.ErrInvalid.Code, Message: fmt.Sprintf(
			"gossip key is %d bytes; want 32 (or 16 or 24) bytes in base64, as 'dmsc operator keygen' prints", len(key))}
	}
	return key, nil
}

// GenerateGossipKey returns a new random 32-byte gossip key in base64.
func GenerateGossipKey() (string, error) {
	key := make([]byte, GossipKeySize)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return base64.StdEncoding.EncodeToString(key), nil
}

// validateEncryptKey checks Config.EncryptKey.
func (c *Config) validateEncryptKey() error {
	if len(c.EncryptKey) == 0 {
		return nil
	}
	if err := memberlist.ValidateKey(c.EncryptKey); err != nil {
		return fmt.Errorf("%w: gossip encryption key is %d bytes; want 16, 24 or 32", ErrConfig, len(c.EncryptKey))
	}
	return nil
}

// keyringPath is where the keyring persists: KeyringFile, else
// DataDir/keyring, else nowhere ("").
func (c *Config) keyringPath() string {
	switch {
	case c.KeyringFile != "":
		return c.KeyringFile
	case c.DataDir != "":
		return filepath.Join(c.DataDir, KeyringFileName)
	}
	return ""
}

// readKeyringFile reads a keyring file: a JSON list of base64 keys, the
// primary key first (as Consul's local.keyring). A file that does not
// exist is no keyring (nil, nil).
func readKeyringFile(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, maxKeyringFile+1)); err != nil {
		return nil, err
	}
	if b.Len() > maxKeyringFile {
		return nil, fmt.Errorf("larger than %d bytes", maxKeyringFile)
	}
	var encoded []string
	if err := json.Unmarshal(b.Bytes(), &encoded); err != nil {
		return nil, fmt.Errorf("not a JSON list of base64 keys: %w", err)
	}
	if len(encoded) == 0 {
		return nil, errors.New("holds no key")
	}
	keys := make([][]byte, len(encoded))
	for i, s := range encoded {
		if keys[i], err = DecodeGossipKey(s); err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
	}
	return keys, nil
}

// writeKeyringFile replaces the keyring file with keys, whole or not at
// all: a temporary file of mode 0600 in the same directory, synced, then
// renamed over it.
func writeKeyringFile(path string, keys [][]byte) (err error) {
	encoded := make([]string, len(keys))
	for i, k := range keys {
		encoded[i] = base64.StdEncoding.EncodeToString(k)
	}
	data, err := json.Marshal(encoded)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself, where the file system allows
		d.Close()
	}
	return nil
}

// gossipKeyring is a node's gossip keyring: memberlist's, and the file it
// persists in. mu orders changes and their writes to the file.
type gossipKeyring struct {
	mu   sync.Mutex
	ring *memberlist.Keyring // nil: gossip is not encrypted
	path string
}

// setupKeyring builds the keyring memberlist starts with, from the
// keyring file when there is one, else from Config.EncryptKey (then
// written to the file), and turns on encryption and verification both
// ways. Without either, gossip stays in plain text.
func (n *Node) setupKeyring(c *memberlist.Config) error {
	path := n.cfg.keyringPath()
	var keys [][]byte
	if path != "" {
		stored, err := readKeyringFile(path)
		if err != nil {
			return fmt.Errorf("%w: keyring file %s: %v", ErrConfig, path, err)
		}
		if stored != nil && len(n.cfg.EncryptKey) > 0 {
			n.log.Info("using the gossip keyring stored in the keyring file; it wins over the configured encryption key",
				"file", path, "keys", len(stored), "configured_key_is_primary", bytes.Equal(stored[0], n.cfg.EncryptKey),
				"configured_key_installed", slices.ContainsFunc(stored, func(k []byte) bool { return bytes.Equal(k, n.cfg.EncryptKey) }))
		}
		keys = stored
	}
	if keys == nil && len(n.cfg.EncryptKey) > 0 {
		keys = [][]byte{slices.Clone(n.cfg.EncryptKey)}
		if path != "" {
			if err := writeKeyringFile(path, keys); err != nil {
				return fmt.Errorf("write keyring file %s: %w", path, err)
			}
		}
	}
	if keys == nil {
		return nil
	}
	ring, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return fmt.Errorf("%w: gossip keyring: %v", ErrConfig, err)
	}
	if path == "" {
		n.log.Warn("the gossip keyring is not persisted (no data directory or keyring file): keys rotated at run time are lost on restart")
	}
	c.Keyring = ring
	c.GossipVerifyIncoming = true
	c.GossipVerifyOutgoing = true
	n.gossipKeys.mu.Lock()
	n.gossipKeys.ring, n.gossipKeys.path = ring, path
	n.gossipKeys.mu.Unlock()
	n.log.Info("gossip encryption on", "keys", len(keys))
	return nil
}

// keyringLocal applies op to this node's keyring, persisting the new
// keyring before memberlist uses it, and returns the keys, primary first.
// Installing a key already there and removing one that is not are no-ops;
// using a key that is not installed and removing the primary key are
// refused (fsm.ErrConflict).
func (n *Node) keyringLocal(op KeyringOp, key []byte) ([][]byte, error) {
	kr := &n.gossipKeys
	kr.mu.Lock()
	defer kr.mu.Unlock()
	if kr.ring == nil {
		return nil, &fsm.Error{Code: fsm.ErrConflict.Code, Message: "gossip encryption is off on node " + n.cfg.NodeID +
			"; it is turned on at start with an encryption key, not at run time"}
	}
	cur := slices.Clone(kr.ring.GetKeys())
	has := slices.ContainsFunc(cur, func(k []byte) bool { return bytes.Equal(k, key) })
	var next [][]byte
	switch op {
	case KeyringList:
		return cur, nil
	case KeyringInstall:
		if has {
			return cur, nil
		}
		next = append(slices.Clone(cur), key)
	case KeyringUse:
		if !has {
			return nil, &fsm.Error{Code: fsm.ErrConflict.Code, Message: "the key is not installed on node " + n.cfg.NodeID + "; install it first"}
		}
		if bytes.Equal(cur[0], key) {
			return cur, nil
		}
		next = [][]byte{key}
		for _, k := range cur {
			if !bytes.Equal(k, key) {
				next = append(next, k)
			}
		}
	case KeyringRemove:
		if bytes.Equal(cur[0], key) {
			return nil, &fsm.Error{Code: fsm.ErrConflict.Code, Message: "the key is the primary key of node " + n.cfg.NodeID +
				"; make another key primary (use) before removing it"}
		}
		if !has {
			return cur, nil
		}
		next = slices.DeleteFunc(slices.Clone(cur), func(k []byte) bool { return bytes.Equal(k, key) })
	default:
		return nil, &fsm.Error{Code: fsm.ErrInvalid.Code, Message: fmt.Sprintf("unknown keyring operation %q", op)}
	}
	if kr.path != "" {
		if err := writeKeyringFile(kr.path, next); err != nil {
			return nil, fmt.Errorf("node %s: persist the keyring: %w", n.cfg.NodeID, err)
		}
	}
	var err error
	switch op {
	case KeyringInstall:
		err = kr.ring.AddKey(key)
	case KeyringUse:
		err = kr.ring.UseKey(key)
	case KeyringRemove:
		// memberlist's RemoveKey shifts the keys in place, in the array
		// that GetKeys hands to gossip readers; UseKey of the primary key
		// first gives the ring a fresh array, so only a reader that
		// fetched the keys between these two calls can see the shift.
		if err = kr.ring.UseKey(cur[0]); err == nil {
			err = kr.ring.RemoveKey(key)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: %s the key: %w", n.cfg.NodeID, op, err)
	}
	n.log.Info("gossip keyring changed", "operation", string(op), "keys", len(next))
	return next, nil
}

// RPCKeyring serves a keyring operation a server fans out to this node.
func (n *Node) RPCKeyring(ctx context.Context, req transport.KeyringRequest) (transport.KeyringResponse, error) {
	if err := n.running(); err != nil {
		return transport.KeyringResponse{}, err
	}
	var key []byte
	if KeyringOp(req.Op) != KeyringList {
		var err error
		if key, err = DecodeGossipKey(req.Key); err != nil {
			return transport.KeyringResponse{}, err
		}
	}
	keys, err := n.keyringLocal(KeyringOp(req.Op), key)
	if err != nil {
		return transport.KeyringResponse{}, err
	}
	return transport.KeyringResponse{Node: n.cfg.NodeID, Keys: encodeKeys(keys)}, nil
}

func encodeKeys(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = base64.StdEncoding.EncodeToString(k)
	}
	return out
}
