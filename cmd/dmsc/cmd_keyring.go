package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
)

// keygenCommand is `dmsc operator keygen`.
type keygenCommand struct{ ui cli.Ui }

func (c *keygenCommand) Synopsis() string { return "Print a new gossip encryption key" }

func (c *keygenCommand) Help() string {
	return strings.TrimSpace(`
Usage: dmsc operator keygen

  Prints a new random gossip encryption key: 32 bytes in base64, from the
  operating system's random source. Start every agent of a new cluster
  with it (-encrypt, DMSC_ENCRYPT or the config file's encrypt), or
  rotate a running cluster to it with 'dmsc operator keyring'.`)
}

func (c *keygenCommand) Run(args []string) int {
	if len(args) > 0 {
		c.ui.Error("dmsc operator keygen takes no arguments")
		return exitUsage
	}
	key, err := cluster.GenerateGossipKey()
	if err != nil {
		c.ui.Error("Error: " + err.Error())
		return exitError
	}
	c.ui.Output(key)
	return exitOK
}

// keyringCommand is `dmsc operator keyring -list|-install|-use|-remove`.
type keyringCommand struct{ apiCommand }

func (c *keyringCommand) Synopsis() string { return "List and rotate the gossip encryption keys" }

func (c *keyringCommand) Help() string {
	return helpText(`
Usage: dmsc operator keyring [options] -list | -install KEY | -use KEY | -remove KEY

  Lists or changes the gossip encryption keys of every live member of the
  cluster, servers and hosts. A server carries the operation out on each
  member, which stores its keyring in its keyring file before using it,
  so rotated keys survive restarts. Gossip is encrypted with each
  member's primary key and decrypted with any installed key.

  To rotate the key without interrupting gossip:

      dmsc operator keygen                   # prints NEW
      dmsc operator keyring -install NEW     # every member can decrypt NEW
      dmsc operator keyring -use NEW         # every member encrypts with NEW
      dmsc operator keyring -remove OLD      # OLD opens nothing any more

  -use is refused unless every live member holds the key, and -remove
  while the key is any member's primary key. A member that fails is
  named, and the command exits 1: run it again once the member is back
  (every operation may be repeated). A member that was down during a
  rotation and kept only old keys cannot rejoin: give it the current key
  with -encrypt after removing its keyring file.`, `
-list
      List each key with the number of members that hold it and that
      encrypt with it (primary).

  -install=<key>
      Install a key on every member.

  -use=<key>
      Make an installed key every member's primary key.

  -remove=<key>
      Remove a key from every member.`)
}

func (c *keyringCommand) Run(args []string) int {
	fs := c.flags("operator keyring")
	list := fs.Bool("list", false, "")
	var install, use, remove string
	fs.StringVar(&install, "install", "", "")
	fs.StringVar(&use, "use", "", "")
	fs.StringVar(&remove, "remove", "", "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	chosen := 0
	for _, set := range []bool{*list, install != "", use != "", remove != ""} {
		if set {
			chosen++
		}
	}
	if chosen != 1 {
		return c.usageError("operator keyring", "choose exactly one of -list, -install KEY, -use KEY, -remove KEY")
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		var (
			res  *client.KeyringResponse
			err  error
			done string
			key  string
		)
		switch {
		case *list:
			res, err = cl.KeyringList(ctx)
		case install != "":
			key, done = install, "Installed"
			res, err = cl.KeyringInstall(ctx, install)
		case use != "":
			key, done = use, "Now using"
			res, err = cl.KeyringUse(ctx, use)
		default:
			key, done = remove, "Removed"
			res, err = cl.KeyringRemove(ctx, remove)
		}
		if res == nil {
			return err
		}
		c.printKeyring(res, done, key)
		if errors.Is(err, client.ErrKeyringIncomplete) {
			return fmt.Errorf("%d of %d members failed; run the command again once they are back", len(res.Failed), res.Members)
		}
		return err
	})
}

// printKeyring prints a keyring answer: what was done, each key with the
// members that hold it and encrypt with it, and the members that failed.
func (c *keyringCommand) printKeyring(res *client.KeyringResponse, done, key string) {
	if c.json {
		c.printJSON(res)
		return
	}
	if done != "" {
		c.ui.Output(fmt.Sprintf("%s key %s on %d of %d members\n", done, key, res.Members-len(res.Failed), res.Members))
	}
	rows := make([][]string, len(res.Keys))
	for i, k := range res.Keys {
		rows[i] = []string{k.Key, fmt.Sprintf("%d/%d", k.Installed, res.Members), fmt.Sprintf("%d/%d", k.Primary, res.Members)}
	}
	c.output(table([]string{"KEY", "INSTALLED", "PRIMARY"}, rows))
	if len(res.Failed) > 0 {
		rows := make([][]string, len(res.Failed))
		for i, f := range res.Failed {
			rows[i] = []string{f.Node, f.Error}
		}
		c.ui.Output("")
		c.output(table([]string{"FAILED", "ERROR"}, rows))
	}
}
