// Command dmsc is the one binary of dmsc: `dmsc agent` runs a server or a
// host (or, with -dev, a one-node cluster to try things out), and the other
// subcommands talk to a running cluster.
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/hashicorp/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.5.0-dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

// run runs the CLI with args and returns the exit status.
func run(args []string) int {
	ui := &cli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr}
	c := cli.NewCLI("dmsc", version)
	c.Args = args
	c.Commands = commands(ui)
	c.HelpWriter = os.Stdout
	c.ErrorWriter = os.Stderr
	status, err := c.Run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dmsc: %v\n", err)
		return 1
	}
	return status
}

// commands lists the subcommands. Each subcommand lives in its own file.
func commands(ui cli.Ui) map[string]cli.CommandFactory {
	ui = safeUI{ui}
	m := map[string]cli.CommandFactory{
		"agent":       func() (cli.Command, error) { return &agentCommand{ui: ui}, nil },
		"check-ready": func() (cli.Command, error) { return &checkReadyCommand{ui: ui}, nil },
		"version":     func() (cli.Command, error) { return &versionCommand{ui: ui}, nil },
	}
	for name, f := range apiCommands(ui) {
		m[name] = f
	}
	for name, f := range benchCommands(ui) {
		m[name] = f
	}
	for name, f := range replayCommands(ui) {
		m[name] = f
	}
	for name, f := range tlsCommands(ui) {
		m[name] = f
	}
	for name, f := range runCommands(ui) {
		m[name] = f
	}
	return m
}

// versionCommand prints the version.
type versionCommand struct{ ui cli.Ui }

func (c *versionCommand) Synopsis() string { return "Print the dmsc version" }

func (c *versionCommand) Help() string {
	return "Usage: dmsc version\n\n  Prints the version of this dmsc binary."
}

func (c *versionCommand) Run(args []string) int {
	if len(args) > 0 {
		c.ui.Error("dmsc version takes no arguments")
		return 1
	}
	c.ui.Output(fmt.Sprintf("dmsc v%s (%s, %s/%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH))
	return 0
}
