package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
)

// runCommand is dmsc run: allocate, run a command with the devices in its
// environment, keep the lease alive, release at the end.
type runCommand struct{ apiCommand }

func (c *runCommand) Synopsis() string {
	return "Run a command with allocated devices, as srun does"
}

func (c *runCommand) Help() string {
	return helpText(`
Usage: dmsc run [alloc options] [-here] [-wait] [-timeout D] [-ttl D] -- CMD [ARGS...]

  Allocates devices with the options of 'dmsc alloc', runs CMD with them
  in its environment, keeps the allocation's lease alive while CMD runs,
  and releases the allocation when CMD exits; exits with CMD's status
  (128+N when a signal N ended it). SIGINT and SIGTERM are passed on to
  CMD. A request that nothing fits exits 3 with the why-not, as
  'dmsc alloc' does.

  CMD's environment has, besides this one's:
    CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES
        the GPUs on this host (with -here) or on the allocation's first
        host, by ID (their UUIDs when discovery named them);
    DMSC_ALLOCATION_ID, DMSC_DEVICES, DMSC_HOSTS
        the allocation, all its devices and its hosts;
    DMSC_HOSTFILE
        for a gang over several hosts (-max-hosts), a hostfile with a line
        "<host> slots=<GPUs>" per host, as mpirun and DeepSpeed read.

  The lease is short (-ttl, default 15s) and renewed every third of it:
  if dmsc run is killed without releasing, the devices free within it.
  On Linux CMD gets SIGTERM when dmsc run dies.

      dmsc run -here -type GPU -count 2 -- nvidia-smi
      dmsc run -type GPU -count 4 -wait -timeout 1h -- python train.py
      dmsc run -type GPU -count 32 -max-hosts 4 -wait -timeout 2h -- mpirun --hostfile '$DMSC_HOSTFILE' ./train`, `
-here
      Take the devices on this host: the one the agent at -address (by
      default the local agent) runs as.

  -wait
      Wait in the queue up to -timeout for the devices, telling on stderr
      where the request stands. Without it a request that does not fit
      at once is refused.

  -timeout=<duration>
      With -wait: how long to wait. Default 1h.

  -ttl=<duration>
      The lease kept while CMD runs. Default 15s.

  Every option of 'dmsc alloc' (-type, -count, -memory-gb, -max-hosts,
  -topology, -label, -priority, -pool, ...) chooses the devices.`)
}

// DefaultRunWait is how long dmsc run -wait waits without -timeout.
const DefaultRunWait = time.Hour

func (c *runCommand) Run(args []string) int {
	fs := c.flags("run")
	var f allocFlags
	f.add(fs)
	var here, wait bool
	fs.BoolVar(&here, "here", false, "")
	fs.BoolVar(&wait, "wait", false, "")
	// Everything after the flags (or after --) is the command.
	if err := fs.Parse(args); err != nil {
		c.ui.Error(err.Error())
		c.ui.Error("Run 'dmsc run -h' for usage.")
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return c.usageError("run", "give the command to run after --")
	}
	req, msg := f.request()
	if msg != "" {
		return c.usageError("run", "%s", msg)
	}
	req.Timeout = 0
	if wait {
		req.Timeout = client.Duration(cmp0(f.timeout, DefaultRunWait))
	}
	ttl := cmp0(f.ttl, client.DefaultRunLeaseTTL)
	cl, err := c.client()
	if err != nil {
		c.ui.Error(err.Error())
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	// SIGINT and SIGTERM go to CMD once it runs; before, they stop the wait.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	local := ""
	if here {
		self, err := cl.AgentSelf(ctx)
		if err != nil {
			return c.fail(fmt.Errorf("finding this host's node name: %w", err))
		}
		local = self.Member.ID
		req.Host = local
	}
	code := exitOK
	_, err = cl.Run(ctx, req, client.RunOptions{LeaseTTL: ttl, Waiting: c.waiting}, func(ctx context.Context, a *client.Allocation) error {
		code, err = c.start(ctx, cl, a, local, rest, sigs)
		return err
	})
	if err != nil {
		return c.fail(err)
	}
	return code
}

func cmp0(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// waiting tells on stderr where a waiting request stands.
func (c *runCommand) waiting(w client.RunWait) {
	msg := fmt.Sprintf("dmsc run: allocation %s waits in the queue", w.Allocation.ID)
	if w.Position > 0 {
		msg += fmt.Sprintf(", position %d", w.Position)
	}
	if !w.ExpectedStart.IsZero() {
		msg += ", expected to start " + formatTime(w.ExpectedStart)
	}
	c.ui.Error(msg)
}

// start runs CMD with the allocation's devices and waits for it, passing
// on the signals; it returns CMD's exit status.
func (c *runCommand) start(ctx context.Context, cl *client.Client, a *client.Allocation, local string, argv []string, sigs <-chan os.Signal) (int, error) {
	hostOf, err := deviceHosts(ctx, cl, a)
	if err != nil {
		return exitUsage, err
	}
	env, hostfile := client.RunEnv(a, hostOf, local)
	if hostfile != "" {
		dir, err := os.MkdirTemp("", "dmsc-run-")
		if err != nil {
			return exitUsage, err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "hostfile")
		if err := os.WriteFile(path, []byte(hostfile), 0o644); err != nil {
			return exitUsage, err
		}
		env = append(env, "DMSC_HOSTFILE="+path)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return exitUsage, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			cmd.Process.Signal(s) //nolint:errcheck // it may have exited already
		case <-ctx.Done():
			// The lease was lost or the command's context ended: the
			// devices are no longer ours.
			cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
			<-done
			return exitUsage, fmt.Errorf("%s stopped: %w", argv[0], context.Cause(ctx))
		case err := <-done:
			return exitStatus(err), nil
		}
	}
}

// exitStatus is a finished command's exit status: its code, or 128+N
// when signal N ended it.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// deviceHosts finds the host of each device of an allocation over several
// hosts (nil for one host: every device is on its host).
func deviceHosts(ctx context.Context, cl *client.Client, a *client.Allocation) (map[string]string, error) {
	if len(a.Hosts) <= 1 {
		return nil, nil
	}
	out := map[string]string{}
	for _, as := range a.Devices {
		if _, ok := out[as.DeviceID]; ok {
			continue
		}
		d, _, err := cl.Device(ctx, as.DeviceID, nil)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", as.DeviceID, err)
		}
		out[as.DeviceID] = d.Host
	}
	return out, nil
}

func runCommands(ui cli.Ui) map[string]cli.CommandFactory {
	return map[string]cli.CommandFactory{
		"run": func() (cli.Command, error) { return &runCommand{apiCommand{ui: ui}}, nil },
	}
}
