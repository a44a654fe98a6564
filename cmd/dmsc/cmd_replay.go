package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/replay"
	"github.com/dmsc/dmsc/internal/trace"
)

// replayCommand is `dmsc replay`: it reads its flags, has package replay
// run the trace through the scheduler (in process or through clusters),
// and prints what each policy achieves: tables, JSON, plots.
type replayCommand struct {
	apiCommand
	// progress receives the progress bar; nil is standard error.
	progress io.Writer
}

func replayCommands(ui cli.Ui) map[string]cli.CommandFactory {
	return map[string]cli.CommandFactory{
		"replay": func() (cli.Command, error) { return &replayCommand{apiCommand: apiCommand{ui: ui}}, nil },
	}
}

func (c *replayCommand) Synopsis() string {
	return "Replay a cluster trace through the scheduler and measure the policies"
}

func (c *replayCommand) Help() string {
	return helpText(`
Usage: dmsc replay [options]

  Replays a public cluster trace through the scheduler's state machine,
  in this process, once per policy (and seed), in parallel.

  -protocol fgd runs the protocol of the FGD paper (USENIX ATC'23) on the
  openb trace: the openb GPU hosts, every pod in a shuffled order and
  then pods drawn at random until the GPU demand reaches 130 % of the
  cluster's GPUs, nothing ever released, a pod that fits nowhere
  dropped. It prints the allocated GPU % at 100 % and 130 % arrived per
  policy and seed, and the mean per policy beside the paper's figure;
  -json adds the whole curve (allocated % at arrived 0..130 %). It also
  says where the GPU capacity left free at 130 % sits: on GPUs where no
  task of the trace asks so little (SMALL), where the host lacks the CPU
  or memory of every task the GPU could take (STARVED), or where some
  task would fit (OPEN, with the largest share of the trace's tasks that
  fits one such GPU).

  -protocol timeline submits each task at its arrival time and releases
  it when its duration is over (time divided by -speedup); a task that
  does not fit waits in the queue up to -timeout. It reports the mean
  GPU utilisation and samples of it over time, queue wait p50/p95,
  timeouts and refusals by why-not reason. -trace openb uses creation_time
  and deletion_time; -trace philly uses Philly job arrivals and durations
  on -hosts synthetic 8-GPU hosts.

  A progress bar is drawn on stderr. The traces are read from
  ../shared/traces (found from the module root) unless -nodes, -pods or
  -philly name files.

  With -local N or -address the replay goes through a cluster's HTTP API
  instead of the state machine in this process: it registers the trace's
  hosts (named <run>-<host>, every device in pool <run>, where <run> is
  replay-<8 hex digits>, fresh for each run), sets pool <run>'s policy
  (the cluster's policies per device type are left alone), and submits
  each task in the pool with a request ID of its own, so that the
  client's retry after a leader change takes devices once. The tables,
  -json and -plot are those of the in-process replay, whose figures it
  reproduces exactly on a fresh cluster (TIME is then wall time through
  the cluster). The timeline protocol runs in real time: a task's queue
  timeout is the cluster's, releases are sent when the hold time is over.

  Each run must start from an empty cluster: FragmentationAware learns
  its typical workload from the cluster's last 1,000 requests, whatever
  their pool, so a run after another one would not place as the
  in-process replay does. -local N therefore starts a fresh cluster of N
  servers in this process (127.0.0.1, data in a temporary directory) for
  every policy and seed, and stops it after the run. -address replays a
  single run (one -policy and, for fgd, one -seeds) against a running
  cluster, meant to be a fresh test cluster: it warns when the cluster
  has served requests before, and at the end releases the run's
  allocations and removes its hosts and its pool's policy. Restart the
  cluster between runs to compare policies there.

      dmsc replay -protocol fgd -pods ../shared/traces/openb/openb_pod_list_default.csv
      dmsc replay -protocol fgd -policy BestFit,FragmentationAware -seeds 42-44 -plot fgd.png
      dmsc replay -protocol timeline -trace philly -hosts 200 -timeout 1h
      dmsc replay -protocol fgd -quick -local 3
      dmsc replay -protocol fgd -policy FragmentationAware -seeds 42 -address 10.0.0.11,10.0.0.12`, `
-protocol=<fgd|timeline>
      The replay protocol. Default fgd.

  -trace=<openb|philly>
      The trace. philly only with -protocol timeline. Default openb.

  -nodes=<file>, -pods=<file>
      The openb node list and pod list. Defaults: the GPU node list and
      the default pod list under ../shared/traces/openb.

  -philly=<file>
      The Philly job list. Default ../shared/traces/philly.csv.

  -hosts=<n>
      -trace philly: the number of synthetic 8-GPU hosts (default 100).
      -trace openb: use only the first n hosts of the node list (default
      0: all).

  -policy=<all|name,...>
      The policies to replay. Default all.

  -seeds=<list>
      Seeds of the fgd protocol: "42-51", "42,45" or "42". Default 42-51.

  -limit=<n>
      Use only the first n tasks of the trace. Default 0: all.

  -vary=<kind=percent>
      fgd protocol: replay a pod list derived from -pods, as the openb
      variants were derived from the default list, to test a policy on
      a sampling of the trace it was never tuned on. gpushare=P: tasks
      with a share of one GPU carry P % of the GPU request (GPU tasks
      redrawn from the list's, with replacement); multigpu=P: the same
      for tasks of two GPUs or more; gpuspec=P: P % of the GPU tasks
      bound to GPU models, the constraints drawn from those of the list
      (give a list that has some, e.g. openb_pod_list_gpuspec10.csv);
      cpu=P: CPU-only tasks are P % of the tasks. The draw is seeded
      by -vary-seed (default 1); the fgd seeds then shuffle and sample
      the derived list as any other.

  -speedup=<x>, -timeout=<duration>, -samples=<n>
      Timeline protocol: time compression, queue timeout (replay time;
      0 refuses at once) and utilisation samples. Defaults 1, 1h, 20.

  -tenants
      -trace philly: each job in its virtual cluster (the trace's cluster
      column) as a namespace, with a fair-share weight proportional to
      the GPU time its jobs ask for; each policy runs twice, the queue
      served by arrival (FIFO) and by fair share, and the report gives
      each virtual cluster's share against its entitlement, queue wait
      p50/p95 and jobs not placed, side by side. In-process only.

  -half-life=<duration>
      With -tenants: the fair-share usage half-life (replay time).
      Default 24h.

  -gangs
      -trace philly: each policy runs twice, first with every job on one
      host (a job larger than a host is refused), then with the jobs
      larger than a host as gangs over as few 8-GPU hosts as could hold
      them; the report gives utilisation, and per job size the jobs that
      ran and their queue wait p50/p95, side by side. In-process only.

  -parallel=<n>
      Replays run at the same time. Default GOMAXPROCS in process, 1
      with -local (each run has its cluster).

  -local=<n>
      Replay each run through a fresh cluster of n servers (1 to 7)
      started in this process. Default 0: in process, or -address.

  -local-storage=<disk|memory>
      Where the -local servers keep the Raft log: disk (a real server's
      store, with fsync) or memory. Default disk; memory with -quick.

  -plot=<file,...>
      fgd protocol: draw allocated % against arrived %, one line per
      policy (mean over seeds) and the paper's FGD and BestFit points,
      into each file (.png or .svg). With -tenants: one file (per
      policy, when several), the queue wait p95 of each virtual cluster
      by FIFO and by fair share side by side.

  -replot=<file>
      Draw -plot from the saved -json output of an fgd run instead of
      replaying.

  -quick
      A run of a few seconds for CI: the first 100 hosts and the first
      1000 pods, seed 42, BestFit and FragmentationAware (flags given
      explicitly win); with -local, the Raft log in memory. It exits 1
      when a replay places nothing. Uses
      the copy of the openb hosts and first 1000 pods built into the
      binary when the trace files are not found.`)
}

func (c *replayCommand) Run(args []string) int {
	fs := c.flags("replay")
	var (
		protocol, traceName, nodesPath, podsPath, phillyPath string
		policyFlag, seedsFlag, plotFlag, replotPath          string
		hosts, limit, parallel, samples, local               int
		speedup                                              float64
		timeout                                              time.Duration
		quick, tenants, gangs                                bool
		storage                                              string
		halfLife                                             time.Duration
		varyFlag                                             string
		varySeed                                             int64
	)
	fs.StringVar(&protocol, "protocol", "fgd", "")
	fs.StringVar(&traceName, "trace", "openb", "")
	fs.StringVar(&nodesPath, "nodes", "", "")
	fs.StringVar(&podsPath, "pods", "", "")
	fs.StringVar(&phillyPath, "philly", "", "")
	fs.IntVar(&hosts, "hosts", 0, "")
	fs.StringVar(&policyFlag, "policy", "all", "")
	fs.StringVar(&seedsFlag, "seeds", "42-51", "")
	fs.IntVar(&limit, "limit", 0, "")
	fs.Float64Var(&speedup, "speedup", 1, "")
	fs.DurationVar(&timeout, "timeout", time.Hour, "")
	fs.IntVar(&samples, "samples", 20, "")
	fs.IntVar(&parallel, "parallel", runtime.GOMAXPROCS(0), "")
	fs.StringVar(&plotFlag, "plot", "", "")
	fs.BoolVar(&quick, "quick", false, "")
	fs.StringVar(&replotPath, "replot", "", "")
	fs.IntVar(&local, "local", 0, "")
	fs.StringVar(&storage, "local-storage", "disk", "")
	fs.BoolVar(&tenants, "tenants", false, "")
	fs.BoolVar(&gangs, "gangs", false, "")
	fs.DurationVar(&halfLife, "half-life", 24*time.Hour, "")
	fs.StringVar(&varyFlag, "vary", "", "")
	fs.Int64Var(&varySeed, "vary-seed", 1, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if quick {
		if !set["local-storage"] {
			storage = "memory"
		}
		if !set["limit"] {
			limit = 1000
		}
		if !set["seeds"] {
			seedsFlag = "42"
		}
		if !set["policy"] {
			policyFlag = "BestFit,FragmentationAware"
		}
		if !set["hosts"] && traceName == "openb" {
			hosts = 100
		}
	}
	policies, err := parsePolicies(policyFlag)
	if err != nil {
		return c.usageError("replay", "-policy: %v", err)
	}
	seeds, err := parseSeeds(seedsFlag)
	if err != nil {
		return c.usageError("replay", "-seeds: %v", err)
	}
	if parallel < 1 {
		parallel = 1
	}
	address := set["address"]
	if (local > 0 || address) && !set["parallel"] {
		parallel = 1 // each run has its cluster
	}
	nRuns := len(policies)
	if protocol == "fgd" {
		nRuns *= len(seeds)
	}
	switch {
	case local < 0 || local > 7:
		return c.usageError("replay", "-local takes 1 to 7 servers")
	case local > 0 && address:
		return c.usageError("replay", "give -local or -address, not both")
	case storage != "disk" && storage != "memory":
		return c.usageError("replay", "-local-storage is disk or memory, not %q", storage)
	case address && nRuns > 1:
		return c.usageError("replay", "-address replays one run: got %d policies and %d seeds. Each run must start from an empty cluster "+
			"(FragmentationAware learns from the cluster's last 1,000 requests): give one -policy and one -seeds and restart the "+
			"cluster between runs, or use -local N, which starts a fresh cluster per run", len(policies), nRuns/len(policies))
	}
	switch {
	case protocol != "fgd" && protocol != "timeline":
		return c.usageError("replay", "-protocol %q: want fgd or timeline", protocol)
	case traceName != "openb" && traceName != "philly":
		return c.usageError("replay", "-trace %q: want openb or philly", traceName)
	case traceName == "philly" && protocol != "timeline":
		return c.usageError("replay", "-trace philly has no host inventory or task shapes: use -protocol timeline")
	case hosts < 0:
		return c.usageError("replay", "-hosts %d: want at least 1", hosts)
	case timeout < 0 || timeout > fsm.MaxDuration:
		return c.usageError("replay", "-timeout %v out of 0..%v", timeout, fsm.MaxDuration)
	case plotFlag != "" && protocol != "fgd" && !tenants && !gangs:
		return c.usageError("replay", "-plot draws the fgd protocol's curves, or -tenants' or -gangs' waits")
	case (tenants || gangs) && (traceName != "philly" || local > 0 || address):
		return c.usageError("replay", "-tenants and -gangs replay -trace philly in process (no -local or -address)")
	case tenants && gangs:
		return c.usageError("replay", "-tenants and -gangs are two reports: give one")
	case (varyFlag != "" || set["vary-seed"]) && (protocol != "fgd" || traceName != "openb"):
		return c.usageError("replay", "-vary derives an openb pod list for -protocol fgd")
	case halfLife <= 0 || halfLife > fsm.MaxDuration:
		return c.usageError("replay", "-half-life %v out of (0, %v]", halfLife, fsm.MaxDuration)
	}
	var vary replay.Variation
	if varyFlag != "" {
		if vary, err = replay.ParseVariation(varyFlag); err != nil {
			return c.usageError("replay", "-vary: %v", err)
		}
	}
	if replotPath != "" {
		if plotFlag == "" {
			return c.usageError("replay", "-replot needs -plot")
		}
		if err := replot(replotPath, plotFlag); err != nil {
			return c.fail(err)
		}
		return 0
	}
	progress := c.progress
	if progress == nil {
		progress = os.Stderr
	}
	ctx, cancel := commandContext()
	defer cancel()
	opts := replay.TimelineOptions{Speedup: speedup, Timeout: timeout, Samples: samples}
	runner := replay.Runner{Parallel: parallel, Target: replay.Target{Local: local, LocalMemory: storage == "memory", Version: version}}

	if traceName == "philly" {
		if hosts == 0 {
			hosts = 100
		}
		if phillyPath == "" {
			phillyPath = filepath.Join(replay.TracesDir(), "philly.csv")
		}
		jobs, err := trace.ReadPhillyFile(phillyPath)
		if err != nil {
			return c.fail(err)
		}
		tasks := replay.PhillyTimeline(jobs)
		if limit > 0 && limit < len(tasks) {
			tasks = tasks[:limit]
		}
		if tenants {
			opts.Tenants, opts.Weights, opts.HalfLife = true, replay.TenantWeights(tasks), halfLife
			return c.tenantTimeline(ctx, progress, runner, replay.PhillyHosts(hosts), tasks, policies, opts, plotFlag)
		}
		if gangs {
			return c.gangTimeline(ctx, progress, runner, replay.PhillyHosts(hosts), tasks, policies, opts, plotFlag)
		}
		if err := c.announce(ctx, &runner, address, progress); err != nil {
			return c.fail(err)
		}
		return c.timeline(ctx, progress, runner, replay.PhillyHosts(hosts), tasks, policies, opts,
			map[string]any{"trace": "philly", "philly": phillyPath, "hosts": hosts})
	}

	in, err := replay.LoadOpenb(nodesPath, podsPath, quick && !set["nodes"] && !set["pods"])
	if err != nil {
		return c.fail(err)
	}
	if in.Missing != "" {
		fmt.Fprintf(progress, "replay: %s not found: using the built-in openb sample (all GPU hosts, first 1000 pods)\n", in.Missing)
	}
	nodes, tasks := in.Nodes, in.Tasks
	if varyFlag != "" {
		if tasks, err = replay.Vary(tasks, vary, varySeed); err != nil {
			return c.usageError("replay", "-vary: %v", err)
		}
		in.Source = fmt.Sprintf("%s, %s (seed %d)", in.Source, vary, varySeed)
	}
	if limit > 0 && limit < len(tasks) {
		tasks = tasks[:limit]
	}
	if hosts > 0 && hosts < len(nodes) {
		nodes = nodes[:hosts]
	}
	if err := c.announce(ctx, &runner, address, progress); err != nil {
		return c.fail(err)
	}
	if protocol == "timeline" {
		return c.timeline(ctx, progress, runner, nodes, replay.OpenbTimeline(tasks), policies, opts,
			map[string]any{"trace": "openb", "source": in.Source})
	}
	// The paper's figures are for the whole default pod list only.
	paper := strings.Contains(filepath.Base(in.Source), "openb_pod_list_default") && limit == 0 && hosts == 0 && varyFlag == ""
	return c.fgd(ctx, progress, runner, nodes, tasks, policies, seeds, fgdOutput{source: in.Source, seeds: seedsFlag, plot: plotFlag, paper: paper})
}

// fgdOutput says how to print an fgd replay.
type fgdOutput struct {
	// source names the pod list; seeds is the -seeds flag.
	source, seeds string
	// plot lists the files to draw the curves into.
	plot string
	// paper says the paper's figures apply: the whole default pod list.
	paper bool
}

// fgd runs the fgd protocol for each policy and seed and prints the
// result.
func (c *replayCommand) fgd(ctx context.Context, progress io.Writer, runner replay.Runner, nodes []trace.Node, tasks []trace.Task,
	policies []fsm.Policy, seeds []int64, out fgdOutput) int {
	label := "replay fgd"
	if runner.Target.Live() {
		label += " (tasks)"
	}
	bar := newProgressBar(progress, label)
	runner.Progress = bar.set
	results, err := runner.Protocol(ctx, nodes, tasks, policies, seeds)
	bar.done()
	if err != nil {
		return c.fail(err)
	}
	means := replay.MeanCurves(policies, results)
	if !out.paper {
		for i := range means {
			means[i].Paper = ""
		}
	}
	status := 0
	for _, r := range results {
		if r.Placed == 0 || r.At130 <= 0 {
			c.ui.Error(fmt.Sprintf("replay: %s seed %d placed no GPU task", r.Policy, r.Seed))
			status = 1
		}
	}
	if out.plot != "" {
		if err := plotMeans(out.source, len(seeds), means, out.plot); err != nil {
			return c.fail(err)
		}
	}
	if c.json {
		type runJSON struct {
			Policy    fsm.Policy       `json:"policy"`
			Seed      int64            `json:"seed"`
			At100     float64          `json:"at100"`
			At130     float64          `json:"at130"`
			Tasks     int              `json:"tasks"`
			Placed    int              `json:"placed"`
			ElapsedS  float64          `json:"elapsed_s"`
			Curve     []float64        `json:"curve"`
			GPUsTotal int              `json:"gpus"`
			Leftover  *replay.Leftover `json:"leftover,omitempty"`
		}
		js := struct {
			Protocol string             `json:"protocol"`
			Trace    string             `json:"trace"`
			Source   string             `json:"source"`
			Nodes    int                `json:"nodes"`
			Pods     int                `json:"pods"`
			Seeds    []int64            `json:"seeds"`
			Runs     []runJSON          `json:"runs"`
			Means    []replay.MeanCurve `json:"means"`
		}{Protocol: "fgd", Trace: "openb", Source: out.source, Nodes: len(nodes), Pods: len(tasks), Seeds: seeds, Means: means}
		for _, r := range results {
			js.Runs = append(js.Runs, runJSON{r.Policy, r.Seed, r.At100, r.At130, r.Tasks, r.Placed, r.Elapsed.Seconds(), r.Curve, r.GPUs, r.Leftover})
		}
		c.printJSON(js)
		return status
	}
	var rows [][]string
	for _, r := range results {
		rows = append(rows, []string{string(r.Policy), strconv.FormatInt(r.Seed, 10), fmt.Sprintf("%.2f", r.At100), fmt.Sprintf("%.2f", r.At130),
			fmt.Sprintf("%d/%d", r.Placed, r.Tasks), fmt.Sprintf("%.1fs", r.Elapsed.Seconds())})
	}
	c.output(fmt.Sprintf("fgd protocol: %d hosts, %d pods from %s\n", len(nodes), len(tasks), out.source))
	c.output(table([]string{"POLICY", "SEED", "ALLOC@100%", "ALLOC@130%", "PLACED", "TIME"}, rows))
	rows = rows[:0]
	for _, m := range means {
		rows = append(rows, []string{string(m.Policy), fmt.Sprintf("%.2f", m.At100), fmt.Sprintf("%.2f", m.At130), fmt.Sprintf("%.2f", m.Min130), fmt.Sprintf("%.2f", m.Max130), orDash(m.Paper)})
	}
	c.output("\nmean over seeds " + out.seeds + ":")
	c.output(table([]string{"POLICY", "ALLOC@100%", "ALLOC@130%", "MIN@130%", "MAX@130%", "PAPER@130%"}, rows))
	rows = rows[:0]
	for _, m := range means {
		if l := m.Leftover; l != nil {
			rows = append(rows, []string{string(m.Policy), fmt.Sprintf("%.2f", l.Small), fmt.Sprintf("%.2f", l.Starved), fmt.Sprintf("%.2f", l.Open),
				fmt.Sprintf("%.1f", l.OpenFit), fmt.Sprintf("%.2f", l.Small+l.Starved+l.Open)})
		}
	}
	if len(rows) > 0 {
		c.output("\nGPU capacity left free at 130 %, % of the cluster's (mean): SMALL where no task asks so little,\n" +
			"STARVED where the host lacks CPU or memory for every task that fits the GPU, OPEN where a task\n" +
			"would fit (OPEN FIT: at most this % of the trace's tasks, on any one GPU):")
		c.output(table([]string{"POLICY", "SMALL", "STARVED", "OPEN", "OPEN FIT", "FREE"}, rows))
	}
	return status
}

// timeline runs the timeline protocol for each policy and prints the
// result.
func (c *replayCommand) timeline(ctx context.Context, progress io.Writer, runner replay.Runner, nodes []trace.Node, tasks []replay.TimelineTask,
	policies []fsm.Policy, opts replay.TimelineOptions, about map[string]any) int {
	bar := newProgressBar(progress, "replay timeline (tasks)")
	runner.Progress = bar.set
	results, err := runner.Timeline(ctx, nodes, tasks, policies, opts)
	bar.done()
	if err != nil {
		return c.fail(err)
	}
	for _, r := range results {
		if r.MaxLag > lagWarning {
			fmt.Fprintf(progress, "replay: %s: commands went out up to %v after their replay time; with a queue timeout, "+
				"a request can then time out that the in-process replay places (a lower -speedup helps)\n", r.Policy, r.MaxLag.Round(time.Millisecond))
		}
	}
	if c.json {
		about["protocol"] = "timeline"
		about["nodes"] = len(nodes)
		about["tasks"] = len(tasks)
		about["speedup"] = opts.Speedup
		about["timeout_s"] = opts.Timeout.Seconds()
		about["results"] = results
		c.printJSON(about)
		return 0
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	c.output(fmt.Sprintf("timeline protocol: %d hosts (%d GPUs), %d tasks, speedup %g, timeout %v\n", len(nodes), gpus, len(tasks), opts.Speedup, opts.Timeout))
	var rows [][]string
	for _, r := range results {
		rows = append(rows, []string{string(r.Policy), strconv.Itoa(r.Tasks), strconv.Itoa(r.Placed), strconv.Itoa(r.Waited),
			strconv.Itoa(r.TimedOut), strconv.Itoa(r.Refused), formatWait(r.WaitP50), formatWait(r.WaitP95), fmt.Sprintf("%.2f", r.MeanGPU),
			fmt.Sprintf("%.1fs", r.Elapsed.Seconds())})
	}
	c.output(table([]string{"POLICY", "TASKS", "PLACED", "WAITED", "TIMED OUT", "REFUSED", "WAIT P50", "WAIT P95", "MEAN GPU%", "TIME"}, rows))
	for _, r := range results {
		var util []string
		for _, s := range r.Utilisation {
			util = append(util, fmt.Sprintf("%.0f", s.GPU))
		}
		c.output(fmt.Sprintf("\n%s: GPU %% over %v of replay time, %d samples: %s", r.Policy, r.Span.Round(time.Second), len(r.Utilisation), strings.Join(util, " ")))
		reasons := make([]string, 0, len(r.Reasons))
		for k := range r.Reasons {
			reasons = append(reasons, k)
		}
		sort.Slice(reasons, func(i, j int) bool {
			if r.Reasons[reasons[i]] != r.Reasons[reasons[j]] {
				return r.Reasons[reasons[i]] > r.Reasons[reasons[j]]
			}
			return reasons[i] < reasons[j]
		})
		for _, k := range reasons {
			c.output(fmt.Sprintf("  not placed: %6d  %s", r.Reasons[k], k))
		}
	}
	return 0
}

// lagWarning is how late a live timeline replay may fall behind its
// schedule before the command says so.
const lagWarning = 100 * time.Millisecond

// announce says on progress where the replay runs. With -address it
// points the runner at that cluster under a fresh run name, and warns
// when the cluster has been used.
func (c *replayCommand) announce(ctx context.Context, runner *replay.Runner, address bool, progress io.Writer) error {
	t := &runner.Target
	if t.Local > 0 {
		storage := "disk"
		if t.LocalMemory {
			storage = "memory"
		}
		fmt.Fprintf(progress, "replay: each run on a fresh cluster of %d servers in this process (Raft log on %s)\n", t.Local, storage)
		return nil
	}
	if !address {
		return nil
	}
	cl, err := client.New(client.Config{Addresses: splitAddresses(c.address), Token: c.token, TLS: tlsOrNil(c.tls), Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	t.Client, t.Name = cl, replay.RunName()
	fmt.Fprintf(progress, "replay: run %s (hosts %s-*, pool %s) on %s\n", t.Name, t.Name, t.Name, strings.Join(cl.Addresses(), ", "))
	warn, err := replay.NotFresh(ctx, cl)
	if err != nil {
		return fmt.Errorf("reading the cluster: %w", err)
	}
	if warn != "" {
		fmt.Fprintf(progress, "replay: warning: %s; FragmentationAware learns from the cluster's last 1,000 requests, "+
			"so the figures can differ from the in-process replay's (a fresh cluster reproduces them)\n", warn)
	}
	return nil
}

func formatWait(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// plotMeans draws the mean curves into each file of the comma-separated
// list paths.
func plotMeans(source string, seeds int, means []replay.MeanCurve, paths string) error {
	var lines []replay.CurveLine
	for _, m := range means {
		lines = append(lines, replay.CurveLine{Name: fmt.Sprintf("%s (%.2f)", m.Policy, m.At130), Y: m.Curve})
	}
	title := fmt.Sprintf("fgd protocol, %s, mean of %d seed(s)", filepath.Base(source), seeds)
	for _, path := range strings.Split(paths, ",") {
		if err := replay.PlotCurves(title, lines, replay.PaperPoints, strings.TrimSpace(path)); err != nil {
			return err
		}
	}
	return nil
}

// replot draws the curves of a saved -json output of the fgd protocol.
func replot(jsonPath, paths string) error {
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var saved struct {
		Source string             `json:"source"`
		Seeds  []int64            `json:"seeds"`
		Means  []replay.MeanCurve `json:"means"`
	}
	if err := json.Unmarshal(data, &saved); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	if len(saved.Means) == 0 {
		return fmt.Errorf("%s: no curves (not the -json output of -protocol fgd?)", jsonPath)
	}
	return plotMeans(saved.Source, len(saved.Seeds), saved.Means, paths)
}

// parsePolicies reads "all" or a comma-separated list of policy names.
func parsePolicies(s string) ([]fsm.Policy, error) {
	if strings.EqualFold(strings.TrimSpace(s), "all") {
		return append([]fsm.Policy(nil), fsm.Policies...), nil
	}
	var out []fsm.Policy
	for _, name := range strings.Split(s, ",") {
		p := nameIn(fsm.Policies, strings.TrimSpace(name))
		if paper := nameIn(replay.PaperPolicies, strings.TrimSpace(name)); replay.IsPaperPolicy(paper) {
			p = paper
		} else if !p.Valid() {
			return nil, fmt.Errorf("unknown policy %q", name)
		}
		out = append(out, p)
	}
	return out, nil
}

// parseSeeds reads "42-51", "42,45" or a mix.
func parseSeeds(s string) ([]int64, error) {
	var out []int64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a seed or a range of seeds", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil || b < a || b-a > 10000 {
				return nil, fmt.Errorf("%q is not a range of seeds", part)
			}
		}
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no seeds")
	}
	return out, nil
}

// timelineRun is one of two timeline replays run side by side.
type timelineRun struct {
	label string
	tasks []replay.TimelineTask
	opts  replay.TimelineOptions
}

// twoTimelines runs two timeline replays of every policy, one after the
// other, each with its progress bar.
func twoTimelines(ctx context.Context, progress io.Writer, runner replay.Runner, nodes []trace.Node, policies []fsm.Policy,
	runs [2]timelineRun) ([2][]*replay.TimelineResult, error) {
	var out [2][]*replay.TimelineResult
	for i, r := range runs {
		bar := newProgressBar(progress, r.label)
		runner.Progress = bar.set
		res, err := runner.Timeline(ctx, nodes, r.tasks, policies, r.opts)
		bar.done()
		if err != nil {
			return out, err
		}
		out[i] = res
	}
	return out, nil
}

// gangTimeline runs the timeline protocol for each policy with every job
// on one host, then with the jobs larger than a host as gangs, and prints
// them side by side, by job size.
func (c *replayCommand) gangTimeline(ctx context.Context, progress io.Writer, runner replay.Runner, nodes []trace.Node, tasks []replay.TimelineTask,
	policies []fsm.Policy, opts replay.TimelineOptions, plotPath string) int {
	perHost := replay.PhillyHost.GPUs
	res, err := twoTimelines(ctx, progress, runner, nodes, policies, [2]timelineRun{
		{"replay timeline, one host", tasks, opts}, {"replay timeline, gangs", replay.Gangs(tasks, perHost), opts}})
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(map[string]any{"protocol": "timeline", "trace": "philly", "gangs": true, "nodes": len(nodes), "tasks": len(tasks),
			"timeout_s": opts.Timeout.Seconds(), "one_host": res[0], "gangs_run": res[1]})
		return 0
	}
	c.output(fmt.Sprintf("timeline protocol, one host against gangs: %d hosts of %d GPUs, %d tasks, timeout %v\n",
		len(nodes), perHost, len(tasks), opts.Timeout))
	for p := range policies {
		one, gang := res[0][p], res[1][p]
		var rows [][]string
		for i, r := range []*replay.TimelineResult{one, gang} {
			rows = append(rows, []string{string(r.Policy), []string{"one host", "gangs"}[i], strconv.Itoa(r.Placed), strconv.Itoa(r.TimedOut + r.Refused),
				formatWait(r.WaitP50), formatWait(r.WaitP95), fmt.Sprintf("%.2f", r.MeanGPU)})
		}
		c.output(table([]string{"POLICY", "JOBS", "PLACED", "NOT PLACED", "WAIT P50", "WAIT P95", "MEAN GPU%"}, rows))
		rows = rows[:0]
		for i, a := range one.Sizes {
			b := gang.Sizes[i]
			rows = append(rows, []string{a.Label(), strconv.Itoa(a.Tasks), strconv.Itoa(a.Placed), strconv.Itoa(b.Placed),
				formatWait(a.WaitP50), formatWait(b.WaitP50), formatWait(a.WaitP95), formatWait(b.WaitP95)})
		}
		c.output("")
		c.output(table([]string{"GPUS", "JOBS", "RAN ONE HOST", "RAN GANGS", "P50 ONE HOST", "P50 GANGS", "P95 ONE HOST", "P95 GANGS"}, rows))
		c.output(fmt.Sprintf("\n%s: mean GPU %.2f%% one host, %.2f%% gangs (%+.2f points); jobs placed %d and %d\n",
			one.Policy, one.MeanGPU, gang.MeanGPU, gang.MeanGPU-one.MeanGPU, one.Placed, gang.Placed))
		if plotPath != "" {
			path := plotPath
			if len(policies) > 1 {
				path = strings.TrimSuffix(plotPath, filepath.Ext(plotPath)) + "-" + string(one.Policy) + filepath.Ext(plotPath)
			}
			title := fmt.Sprintf("Philly, %d hosts, %s: queue wait p95 by job size", len(nodes), one.Policy)
			if err := replay.PlotSizes(title, one, gang, path); err != nil {
				return c.fail(err)
			}
			c.output("Plot: " + path)
		}
	}
	return 0
}

// tenantTimeline runs the timeline protocol with tenants for each policy,
// the queue served by arrival and then by fair share, and prints them
// side by side.
func (c *replayCommand) tenantTimeline(ctx context.Context, progress io.Writer, runner replay.Runner, nodes []trace.Node, tasks []replay.TimelineTask,
	policies []fsm.Policy, opts replay.TimelineOptions, plotPath string) int {
	fair := opts
	fair.FairShare = true
	byOrder, err := twoTimelines(ctx, progress, runner, nodes, policies, [2]timelineRun{
		{"replay timeline, FIFO", tasks, opts}, {"replay timeline, fair share", tasks, fair}})
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(map[string]any{"protocol": "timeline", "trace": "philly", "tenants": true, "nodes": len(nodes), "tasks": len(tasks),
			"timeout_s": opts.Timeout.Seconds(), "half_life_s": opts.HalfLife.Seconds(), "fifo": byOrder[0], "fair_share": byOrder[1]})
		return 0
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	c.output(fmt.Sprintf("timeline protocol with tenants: %d hosts (%d GPUs), %d tasks, timeout %v, fair-share half-life %v\n",
		len(nodes), gpus, len(tasks), opts.Timeout, opts.HalfLife))
	for p := range policies {
		fifo, fair := byOrder[0][p], byOrder[1][p]
		var rows [][]string
		for _, r := range []*replay.TimelineResult{fifo, fair} {
			order := "FIFO"
			if r.FairShare {
				order = "fair share"
			}
			rows = append(rows, []string{string(r.Policy), order, strconv.Itoa(r.Placed), strconv.Itoa(r.TimedOut + r.Refused),
				formatWait(r.WaitP50), formatWait(r.WaitP95), fmt.Sprintf("%.2f", r.MeanGPU)})
		}
		c.output(table([]string{"POLICY", "QUEUE", "PLACED", "NOT PLACED", "WAIT P50", "WAIT P95", "MEAN GPU%"}, rows))
		rows = rows[:0]
		worst := 0.0
		for i, a := range fifo.Tenants {
			b := fair.Tenants[i]
			ratio := "-"
			if a.WaitP95 > 0 {
				x := float64(b.WaitP95) / float64(a.WaitP95)
				ratio = fmt.Sprintf("%.2f", x)
				worst = max(worst, x)
			} else if b.WaitP95 > 0 {
				ratio = "inf"
			}
			rows = append(rows, []string{a.Namespace, fmt.Sprintf("%.1f", a.Entitlement), fmt.Sprintf("%.1f", a.Share), fmt.Sprintf("%.1f", b.Share),
				strconv.Itoa(a.Tasks), formatWait(a.WaitP50), formatWait(b.WaitP50), formatWait(a.WaitP95), formatWait(b.WaitP95), ratio,
				strconv.Itoa(a.TimedOut + a.Refused), strconv.Itoa(b.TimedOut + b.Refused)})
		}
		c.output("")
		c.output(table([]string{"NAMESPACE", "ENTITLED%", "SHARE% FIFO", "SHARE% FAIR", "TASKS", "P50 FIFO", "P50 FAIR", "P95 FIFO", "P95 FAIR", "P95 FAIR/FIFO",
			"NOT PLACED FIFO", "NOT PLACED FAIR"}, rows))
		c.output(fmt.Sprintf("\n%s: worst p95 ratio (fair share / FIFO) %.2f; mean GPU %.2f%% FIFO, %.2f%% fair share (%+.2f points)\n",
			fifo.Policy, worst, fifo.MeanGPU, fair.MeanGPU, fair.MeanGPU-fifo.MeanGPU))
		if plotPath != "" {
			path := plotPath
			if len(policies) > 1 {
				path = strings.TrimSuffix(plotPath, filepath.Ext(plotPath)) + "-" + string(fifo.Policy) + filepath.Ext(plotPath)
			}
			title := fmt.Sprintf("Philly, %d hosts, %s: queue wait p95 per virtual cluster", len(nodes), fifo.Policy)
			if err := replay.PlotTenants(title, fifo, fair, path); err != nil {
				return c.fail(err)
			}
			c.output("Plot: " + path)
		}
	}
	return 0
}
