package integration

// Docker helpers of the container test (container_test.go): find a Docker
// engine and a compose command, build the image the way `make image` does,
// make the cluster's secrets with deploy/compose/secrets.sh, and drive one
// compose project of deploy/docker-compose.yml (containers, IP addresses,
// kills, network cuts) under a name no other run uses. Every resource a
// run creates carries its project name, which starts with projectPrefix,
// so a run that was killed before its cleanup can be swept by a later one.

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/internal/certs"
)

const (
	// projectPrefix starts the compose project name of every run; the
	// image tag, the probe network and the compose resources all carry it.
	projectPrefix = "dmsc-ct-"
	// imageRepo is the repository of the images runs build (tag: project).
	imageRepo = "dmsc-test"
	// staleAfter is the age past which another run's leftovers are swept.
	staleAfter = time.Hour
	// dockerTimeout bounds one docker command that is not a build.
	dockerTimeout = 2 * time.Minute
)

// dockerTools are the docker CLI and the compose command found on PATH.
type dockerTools struct {
	// compose is the compose command: ["docker", "compose"] (preferred)
	// or ["docker-compose"].
	compose []string
}

// requireDocker skips the test under -short, when no Docker engine
// answers, or when neither `docker compose` nor `docker-compose` exists.
func requireDocker(t *testing.T) *dockerTools {
	t.Helper()
	if testing.Short() {
		t.Skip("container test skipped in -short mode (it builds an image and runs a 5-container cluster)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("container test skipped: no docker CLI on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("container test skipped: no Docker engine answers (docker info: %v: %s)", err, firstLine(out))
	}
	tools := &dockerTools{}
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil {
		tools.compose = []string{"docker", "compose"}
	} else if _, err := exec.LookPath("docker-compose"); err == nil && exec.CommandContext(ctx, "docker-compose", "version").Run() == nil {
		tools.compose = []string{"docker-compose"}
	} else {
		t.Skip("container test skipped: a Docker engine answers but neither `docker compose` nor `docker-compose` works")
	}
	return tools
}

// firstLine is the first line of a command's output, for skip messages.
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// docker runs the docker CLI and returns its trimmed combined output.
func docker(ctx context.Context, args ...string) (string, error) {
	return runCommand(ctx, nil, "", "docker", args...)
}

// runCommand runs name args in dir (the working directory when empty) with
// extra environment and returns the trimmed combined output; a failure
// carries the output.
func runCommand(ctx context.Context, env []string, dir, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	out := strings.TrimSpace(buf.String())
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return out, nil
}

// repoRoot is the module root: the parent of this package's directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found above %s: %v", wd, err)
	}
	return root
}

// composeProject is one run of deploy/docker-compose.yml.
type composeProject struct {
	t     *testing.T
	tools *dockerTools
	root  string
	// name is the compose project name, unique to this run.
	name string
	// image is the tag this run builds and runs.
	image string
	file  string
	// override is the test's addition to the compose file: the rogue
	// host (testdata/compose-rogue.yml).
	override string
	// secrets is the directory deploy/compose/secrets.sh fills for this
	// run (DMSC_SECRETS_DIR); empty for a project being swept.
	secrets string
	// tls is how the test's clients speak to the nodes: the cluster's CA
	// and the operator's client certificate, both made by secrets.sh.
	tls client.TLSConfig
	// token is the secret of the management token, once the test has
	// bootstrapped the ACLs: the apiClient clients send it.
	token string
	// ids are the container IDs by service, filled in by up.
	ids map[string]string
	// clusterNet is the compose network the nodes talk on.
	clusterNet string
	// probeNet is an internal network of this run only, through which the
	// test still reaches a node cut off from clusterNet.
	probeNet string
}

// newComposeProject names a fresh project, gives it a secrets directory
// of its own, and registers its teardown: when the test failed, the end
// of every container's log is printed (and the whole logs saved in the
// test's artifact directory); then the project is brought down with its
// volumes, the probe network and the image are removed, and the test
// fails if anything of the project is left. The secrets directory goes
// after the teardown.
func newComposeProject(t *testing.T, tools *dockerTools) *composeProject {
	t.Helper()
	suffix := make([]byte, 5)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatal(err)
	}
	name := projectPrefix + hex.EncodeToString(suffix)
	root := repoRoot(t)
	p := &composeProject{
		t: t, tools: tools, root: root, name: name,
		image:    imageRepo + ":" + name,
		file:     filepath.Join(root, "deploy", "docker-compose.yml"),
		override: filepath.Join(root, "integration", "testdata", "compose-rogue.yml"),
		secrets:  filepath.Join(t.TempDir(), "secrets"),
		ids:      map[string]string{},
		probeNet: name + "-probe",
	}
	artifacts := t.ArtifactDir()
	t.Cleanup(func() {
		// The test's own context may be spent; teardown gets its own.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if t.Failed() {
			p.dumpLogs(ctx, artifacts)
		}
		start := time.Now()
		if err := p.teardown(ctx); err != nil {
			t.Errorf("teardown of compose project %s: %v", p.name, err)
		}
		if left := p.leftovers(ctx); len(left) > 0 {
			t.Errorf("compose project %s left behind: %s", p.name, strings.Join(left, ", "))
		}
		t.Logf("teardown of %s (down -v, probe network, image): %v", p.name, time.Since(start).Round(100*time.Millisecond))
	})
	return p
}

// env is the environment of every compose command: which image to run,
// server-1's HTTP port picked free so that runs never collide on it, and
// this run's secrets.
func (p *composeProject) env() []string {
	env := []string{"DMSC_IMAGE=" + p.image, "DMSC_HTTP_PORT=0"}
	if p.secrets != "" {
		env = append(env, "DMSC_SECRETS_DIR="+p.secrets)
	}
	return env
}

// compose runs a compose command of this project: deploy/docker-compose.yml
// and the test's rogue host, which starts only when named.
func (p *composeProject) compose(ctx context.Context, args ...string) (string, error) {
	files := []string{"-f", p.file}
	if p.override != "" {
		files = append(files, "-f", p.override)
	}
	full := append(append(append(append([]string(nil), p.tools.compose[1:]...), files...), "-p", p.name), args...)
	return runCommand(ctx, p.env(), p.root, p.tools.compose[0], full...)
}

// makeSecrets runs deploy/compose/secrets.sh, the step an operator runs
// once (make compose-secrets), with this run's image and into its secrets
// directory, and sets the test's client TLS from what it made: the CA and
// the operator's client certificate.
func (p *composeProject) makeSecrets(ctx context.Context) error {
	env := []string{"DMSC_IMAGE=" + p.image}
	if _, err := runCommand(ctx, env, p.root, "sh", filepath.Join(p.root, "deploy", "compose", "secrets.sh"), p.secrets); err != nil {
		return err
	}
	p.tls = client.TLSConfig{
		CACert:     filepath.Join(p.secrets, certs.CAFile),
		ClientCert: filepath.Join(p.secrets, "client-0.pem"),
		ClientKey:  filepath.Join(p.secrets, "client-0-key.pem"),
	}
	files := []string{p.tls.CACert, p.tls.ClientCert, p.tls.ClientKey, filepath.Join(p.secrets, "gossip.hcl")}
	for _, h := range containerHosts {
		files = append(files, p.hostTokenFile(h))
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("secrets.sh did not make %s: %w", f, err)
		}
	}
	return nil
}

// hostTokenFile is the file of host's ACL token secret that secrets.sh
// makes and the compose file mounts into the host's container.
func (p *composeProject) hostTokenFile(host string) string {
	return filepath.Join(p.secrets, host+".token")
}

// tlsFor is the test's client TLS for nodes whose certificates must carry
// name: a service name (secrets.sh puts it in the node's certificate), or
// "server.dmsc" for any server.
func (p *composeProject) tlsFor(name string) *client.TLSConfig {
	t := p.tls
	t.ServerName = name
	return &t
}

// apiClient is an SDK client of one service's API on the cluster network,
// checking that the service's certificate names it, sending each request
// once, with the management token once there is one.
func (p *composeProject) apiClient(ctx context.Context, service string, timeout time.Duration) (*client.Client, error) {
	return p.apiClientToken(ctx, service, timeout, p.token)
}

// apiClientToken is apiClient with a token of the caller's choice ("":
// none, the anonymous token).
func (p *composeProject) apiClientToken(ctx context.Context, service string, timeout time.Duration, token string) (*client.Client, error) {
	addr := p.addr(ctx, service)
	if addr == "" {
		return nil, fmt.Errorf("%s has no address on the cluster network", service)
	}
	return client.New(client.Config{Addresses: []string{addr}, Timeout: timeout, MaxRetries: -1, TLS: p.tlsFor(service), Token: token})
}

// buildImage builds the image as `make image` does: a static binary and
// two empty directories staged in a context of their own, then
// deploy/Dockerfile. The binary is the one the package's TestMain built
// when that one is static already (CGO_ENABLED=0), else it is built here
// with the release flags (CGO_ENABLED=0, -trimpath, -ldflags '-s -w'). It
// says which, and how long getting the binary took.
func (p *composeProject) buildImage(ctx context.Context) (how string, took time.Duration, err error) {
	stage := p.t.TempDir()
	for _, d := range []string{"data", "tmp"} {
		if err := os.Mkdir(filepath.Join(stage, d), 0o755); err != nil {
			return "", 0, err
		}
	}
	start := time.Now()
	if binary != "" && staticELF(binary) {
		how = "reused the test binary (static)"
		err = copyFile(binary, filepath.Join(stage, "dmsc"))
	} else {
		how = "go build (static, release flags)"
		err = buildStatic(ctx, p.root, filepath.Join(stage, "dmsc"))
	}
	took = time.Since(start)
	if err != nil {
		return how, took, err
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(bctx, "docker", "build", "-q", "-f", filepath.Join(p.root, "deploy", "Dockerfile"),
		"-t", p.image, "--label", "dmsc.test.project="+p.name, stage)
	if out, err := build.CombinedOutput(); err != nil {
		return how, took, fmt.Errorf("docker build: %w\n%s", err, out)
	}
	return how, took, nil
}

// staticELF says whether path is a Linux executable for this machine's
// architecture that needs no dynamic loader, so that it runs on scratch.
func staticELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if want, ok := machines[runtime.GOARCH]; !ok || f.Machine != want || runtime.GOOS != "linux" {
		return false
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// buildStatic builds cmd/dmsc as `make image` does, without the race
// detector whatever GOFLAGS says.
func buildStatic(ctx context.Context, root, out string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return err
	}
	var goflags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if f != "-race" && f != "-race=true" {
			goflags = append(goflags, f)
		}
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./cmd/dmsc")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS="+strings.Join(goflags, " "))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build of the static binary: %w\n%s", err, b)
	}
	return nil
}

// up starts the project and records its container IDs and the network
// the nodes share.
func (p *composeProject) up(ctx context.Context, services ...string) error {
	if _, err := p.compose(ctx, "up", "-d"); err != nil {
		return err
	}
	for _, s := range services {
		id, err := p.compose(ctx, "ps", "-q", s)
		if err != nil {
			return err
		}
		if id == "" || strings.ContainsAny(id, " \n") {
			return fmt.Errorf("service %s: container ID %q", s, id)
		}
		p.ids[s] = id
	}
	nets, err := p.networks(ctx, services[0])
	if err != nil {
		return err
	}
	if len(nets) != 1 {
		return fmt.Errorf("%s is on %d networks, want 1: %v", services[0], len(nets), nets)
	}
	for n := range nets {
		p.clusterNet = n
	}
	return nil
}

// networks maps each network a service's container is attached to, to its
// IP address there.
func (p *composeProject) networks(ctx context.Context, service string) (map[string]string, error) {
	out, err := docker(ctx, "inspect", "-f",
		`{{range $n, $e := .NetworkSettings.Networks}}{{$n}} {{$e.IPAddress}}{{"\n"}}{{end}}`, p.ids[service])
	if err != nil {
		return nil, err
	}
	nets := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if n, ip, ok := strings.Cut(strings.TrimSpace(line), " "); ok && ip != "" {
			nets[n] = ip
		}
	}
	return nets, nil
}

// addr is a service's HTTPS API on the cluster network (empty when it is
// not attached or not running).
func (p *composeProject) addr(ctx context.Context, service string) string {
	nets, err := p.networks(ctx, service)
	if err != nil || nets[p.clusterNet] == "" {
		return ""
	}
	return "https://" + nets[p.clusterNet] + ":4646"
}

// kill sends SIGKILL to a service's container.
func (p *composeProject) kill(ctx context.Context, service string) error {
	_, err := docker(ctx, "kill", p.ids[service])
	return err
}

// start starts a stopped container again (same volume, same command line).
func (p *composeProject) start(ctx context.Context, service string) error {
	_, err := docker(ctx, "start", p.ids[service])
	return err
}

// exec runs a command in a service's container and returns its output and
// exit status (-1 when it could not be run).
func (p *composeProject) exec(ctx context.Context, service string, args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append([]string{"exec", p.ids[service]}, args...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return strings.TrimSpace(string(out)), 0
	case errors.As(err, &exit):
		return strings.TrimSpace(string(out)), exit.ExitCode()
	default:
		return err.Error(), -1
	}
}

// isolate cuts a service off the cluster network (`docker network
// disconnect`), after attaching it to the run's internal probe network so
// that the test can still ask it things. It returns the service's cluster
// IP, which reconnect asks for back, and its HTTPS API on the probe
// network. The probe network is internal (no gateway, no route out), so
// nothing of the cluster is reachable through it.
func (p *composeProject) isolate(ctx context.Context, service string) (clusterIP, probeAddr string, err error) {
	nets, err := p.networks(ctx, service)
	if err != nil {
		return "", "", err
	}
	clusterIP = nets[p.clusterNet]
	if _, err := docker(ctx, "network", "inspect", p.probeNet); err != nil {
		if _, err := docker(ctx, "network", "create", "--internal", "--label", "dmsc.test.project="+p.name, p.probeNet); err != nil {
			return "", "", err
		}
	}
	if _, err := docker(ctx, "network", "connect", p.probeNet, p.ids[service]); err != nil {
		return "", "", err
	}
	if _, err := docker(ctx, "network", "disconnect", p.clusterNet, p.ids[service]); err != nil {
		return "", "", err
	}
	nets, err = p.networks(ctx, service)
	if err != nil {
		return "", "", err
	}
	if nets[p.probeNet] == "" {
		return "", "", fmt.Errorf("%s has no address on %s: %v", service, p.probeNet, nets)
	}
	return clusterIP, "https://" + nets[p.probeNet] + ":4646", nil
}

// reconnect attaches an isolated service to the cluster network again and
// detaches it from the probe network. The node advertises the address it
// started with, so it must get the same IP back; Docker hands out the
// lowest free address of the network, which is the one it gave up.
func (p *composeProject) reconnect(ctx context.Context, service, clusterIP string) error {
	if _, err := docker(ctx, "network", "connect", p.clusterNet, p.ids[service]); err != nil {
		return err
	}
	if _, err := docker(ctx, "network", "disconnect", p.probeNet, p.ids[service]); err != nil {
		return err
	}
	nets, err := p.networks(ctx, service)
	if err != nil {
		return err
	}
	if got := nets[p.clusterNet]; got != clusterIP {
		return fmt.Errorf("%s came back on %s with IP %s, not its old %s: it still advertises the old one", service, p.clusterNet, got, clusterIP)
	}
	return nil
}

// dumpLogs prints the last lines of every container's log and saves the
// whole logs under dir.
func (p *composeProject) dumpLogs(ctx context.Context, dir string) {
	services := make([]string, 0, len(p.ids))
	for s := range p.ids {
		services = append(services, s)
	}
	sort.Strings(services)
	for _, s := range services {
		out, err := docker(ctx, "logs", "-t", p.ids[s])
		if err != nil {
			p.t.Logf("logs of %s: %v", s, err)
			continue
		}
		path := filepath.Join(dir, s+".log")
		if err := os.WriteFile(path, []byte(out+"\n"), 0o644); err != nil {
			p.t.Logf("saving logs of %s: %v", s, err)
		}
		lines := strings.Split(out, "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		p.t.Logf("---- last %d lines of %s (the whole log: %s, kept with go test -artifacts) ----\n%s",
			len(lines), s, path, strings.Join(lines, "\n"))
	}
}

// teardown removes everything the run created: the compose project with
// its volumes, the probe network and the image.
func (p *composeProject) teardown(ctx context.Context) error {
	_, err := p.compose(ctx, "down", "-v", "--remove-orphans", "-t", "5")
	if _, nerr := docker(ctx, "network", "inspect", p.probeNet); nerr == nil {
		// Still attached only if the test stopped midway; down removed the
		// containers, so it is free now.
		if _, rerr := docker(ctx, "network", "rm", p.probeNet); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if _, ierr := docker(ctx, "image", "inspect", p.image); ierr == nil {
		if _, rerr := docker(ctx, "rmi", "-f", p.image); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// leftovers lists the project's containers, networks and volumes that
// still exist.
func (p *composeProject) leftovers(ctx context.Context) []string {
	var left []string
	label := "label=com.docker.compose.project=" + p.name
	for _, q := range [][]string{
		{"ps", "-a", "-q", "--filter", label},
		{"network", "ls", "-q", "--filter", label},
		{"network", "ls", "-q", "--filter", "name=^" + p.probeNet + "$"},
		{"volume", "ls", "-q", "--filter", label},
		{"images", "-q", p.image},
	} {
		out, err := docker(ctx, q...)
		if err != nil {
			left = append(left, fmt.Sprintf("(docker %s: %v)", q[0], err))
			continue
		}
		for _, id := range strings.Fields(out) {
			left = append(left, q[0]+" "+id)
		}
	}
	return left
}

// sweepStale removes what runs that died before their cleanup (a test
// binary killed by -timeout) left behind: compose projects, probe networks
// and images of this test older than staleAfter. Younger ones may belong
// to a run in progress and are left alone.
func sweepStale(t *testing.T, tools *dockerTools) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stale := map[string]bool{}
	out, err := docker(ctx, "ps", "-a", "--filter", "label=com.docker.compose.project",
		"--format", `{{.Label "com.docker.compose.project"}}|{{.CreatedAt}}`)
	if err != nil {
		t.Logf("sweeping stale projects: %v", err)
		return
	}
	for _, line := range strings.Split(out, "\n") {
		name, created, ok := strings.Cut(line, "|")
		if ok && strings.HasPrefix(name, projectPrefix) && olderThan(created, staleAfter) {
			stale[name] = true
		}
	}
	out, _ = docker(ctx, "network", "ls", "--filter", "name="+projectPrefix, "--format", "{{.Name}}|{{.CreatedAt}}")
	for _, line := range strings.Split(out, "\n") {
		name, created, ok := strings.Cut(line, "|")
		if ok && strings.HasPrefix(name, projectPrefix) && olderThan(created, staleAfter) {
			stale[strings.TrimSuffix(strings.TrimSuffix(name, "-probe"), "_cluster")] = true
		}
	}
	out, _ = docker(ctx, "images", imageRepo, "--format", "{{.Tag}}|{{.CreatedAt}}")
	for _, line := range strings.Split(out, "\n") {
		tag, created, ok := strings.Cut(line, "|")
		if ok && strings.HasPrefix(tag, projectPrefix) && olderThan(created, staleAfter) {
			stale[tag] = true
		}
	}
	names := make([]string, 0, len(stale))
	for n := range stale {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := &composeProject{t: t, tools: tools, root: repoRoot(t), name: n, image: imageRepo + ":" + n,
			file: filepath.Join(repoRoot(t), "deploy", "docker-compose.yml"), probeNet: n + "-probe"}
		err := p.teardown(ctx)
		t.Logf("swept stale compose project %s (older than %v): %v", n, staleAfter, err)
	}
}

// olderThan parses the CreatedAt of docker's listings ("2006-01-02
// 15:04:05 -0700 MST") and says whether it is older than d; an unreadable
// time is not.
func olderThan(created string, d time.Duration) bool {
	created = strings.TrimSpace(created)
	for _, layout := range []string{"2006-01-02 15:04:05 -0700 MST", "2006-01-02 15:04:05 -0700 -0700"} {
		if ts, err := time.Parse(layout, created); err == nil {
			return time.Since(ts) > d
		}
	}
	return false
}

// rogueService is the test's rogue host (testdata/compose-rogue.yml).
const rogueService = "rogue-host"

// startRogue starts the rogue host: a device host with a certificate of
// the cluster's CA for its own name, made here, but without the gossip
// key. Its directory, read by the agent as user 65532, is world-readable
// inside the run's 0700 secrets directory, as secrets.sh does it.
func (p *composeProject) startRogue(ctx context.Context) error {
	dir := filepath.Join(p.secrets, rogueService)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(p.secrets, certs.CAFile))
	if err != nil {
		return err
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(p.secrets, certs.CAKeyFile))
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := certs.NewCert(caPEM, caKeyPEM, certs.Request{Role: certs.Host, Node: rogueService, DNS: []string{rogueService}})
	if err != nil {
		return err
	}
	devices := `{"devices": [{"id": "rogue-gpu0", "type": "GPU", "name": "NVIDIA H100 80GB HBM3", "capabilities": {"memory_gb": 80}}]}`
	for name, b := range map[string][]byte{"ca.pem": caPEM, "agent.pem": certPEM, "agent-key.pem": keyPEM, "devices.json": []byte(devices)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(dir, name), 0o644); err != nil {
			return err
		}
	}
	// It is in a profile so that `up -d` leaves it alone: check that it
	// did, or the cluster would have met it before its checks.
	if id, err := p.compose(ctx, "--profile", "rogue", "ps", "-q", rogueService); err != nil || id != "" {
		return fmt.Errorf("the rogue host has a container before the test starts it (%q, %v): was its profile ignored?", id, err)
	}
	if _, err := p.compose(ctx, "--profile", "rogue", "up", "-d", rogueService); err != nil {
		return err
	}
	id, err := p.compose(ctx, "--profile", "rogue", "ps", "-q", rogueService)
	if err != nil {
		return err
	}
	if id == "" || strings.ContainsAny(id, " \n") {
		return fmt.Errorf("service %s: container ID %q", rogueService, id)
	}
	p.ids[rogueService] = id
	return nil
}

// removeRogue stops and removes the rogue host.
func (p *composeProject) removeRogue(ctx context.Context) error {
	_, err := p.compose(ctx, "--profile", "rogue", "rm", "-s", "-f", rogueService)
	return err
}

// logCount counts the lines of a service's container log that contain s.
func (p *composeProject) logCount(ctx context.Context, service, s string) (int, error) {
	out, err := docker(ctx, "logs", p.ids[service])
	if err != nil {
		return 0, err
	}
	return strings.Count(out, s), nil
}
