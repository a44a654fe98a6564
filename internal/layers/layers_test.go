package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// module is the import path of this module.
const module = "github.com/dmsc/dmsc"

// layers are the layers of the module, bottom first. A package may import
// the module's packages of its own layer and of the layers below it, never
// one above. Every package of the module is in exactly one layer; a path
// ending in "/..." is that package and every package under it.
var layers = []struct {
	name string
	pkgs []string
}{
	// The cluster's certificates, on the standard library alone.
	{"certs", []string{"internal/certs"}},
	// JSON written directly as encoding/json writes it, on the standard
	// library alone.
	{"jsonappend", []string{"internal/jsonappend"}},
	// The JSON of the HTTP API, shared by the SDK and the server.
	{"wire", []string{"client/wire"}},
	// The web UI's files.
	{"ui", []string{"ui"}},
	// The scheduler's state machine.
	{"fsm", []string{"fsm"}},
	// A replica's recent events, for the event stream.
	{"events", []string{"events"}},
	// Node-to-node traffic.
	{"transport", []string{"transport/..."}},
	// A running node: Raft, gossip, forwarding.
	{"cluster", []string{"cluster"}},
	// The HTTP API over a node.
	{"api", []string{"api/..."}},
	// The Go SDK over the HTTP API.
	{"sdk", []string{"client"}},
	// The binary, the internal packages it is made of, and the tests of
	// the whole.
	{"cmd", []string{"cmd/...", "internal/...", "integration"}},
}

// serverModules are the server's dependencies that the SDK must not pull
// in, by module path.
var serverModules = []string{
	"github.com/hashicorp/raft",
	"github.com/hashicorp/raft-boltdb",
	"go.etcd.io/bbolt",
	"github.com/boltdb/bolt",
	"github.com/hashicorp/memberlist",
	"github.com/hashicorp/go-msgpack",
	"github.com/armon/go-metrics",
	"github.com/hashicorp/go-metrics",
}

// layerOf returns the index of a module package's layer (path relative to
// the module), or -1 when no layer holds it.
func layerOf(rel string) int {
	for i, l := range layers {
		for _, p := range l.pkgs {
			if base, all := strings.CutSuffix(p, "/..."); all && (rel == base || strings.HasPrefix(rel, base+"/")) || rel == p {
				return i
			}
		}
	}
	return -1
}

// relPath is path relative to the module, and whether it is in it.
func relPath(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	return strings.CutPrefix(path, module+"/")
}

// layerViolations checks the import graph (package: its imports, full
// paths) against the layers.
func layerViolations(imports map[string][]string) []string {
	var out []string
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		rel, ok := relPath(pkg)
		if !ok {
			continue
		}
		from := layerOf(rel)
		if from < 0 {
			out = append(out, fmt.Sprintf("%s is in no layer: add it to the table in layers_test.go", rel))
			continue
		}
		for _, imp := range imports[pkg] {
			irel, ok := relPath(imp)
			if !ok {
				continue
			}
			if to := layerOf(irel); to > from {
				out = append(out, fmt.Sprintf("%s (layer %s) imports %s (layer %s, above it)", rel, layers[from].name, irel, layers[to].name))
			}
		}
	}
	return out
}

// depViolations checks the dependencies of a set of packages: none may be
// a package of the module other than those allowed, nor one of the
// modules forbidden.
func depViolations(what string, deps []string, allowed func(rel string) bool, forbidden []string) []string {
	var out []string
	for _, d := range deps {
		if rel, ok := relPath(d); ok {
			if !allowed(rel) {
				out = append(out, fmt.Sprintf("%s depends on %s", what, rel))
			}
			continue
		}
		for _, m := range forbidden {
			if d == m || strings.HasPrefix(d, m+"/") {
				out = append(out, fmt.Sprintf("%s depends on %s", what, d))
			}
		}
	}
	return out
}

// goCommand is the go command of the toolchain that runs the test.
func goCommand(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// goList runs go list -json in the module's root with args and returns
// the packages it describes.
func goList(t *testing.T, args ...string) []listedPackage {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil || !fileExists(filepath.Join(root, "go.mod")) {
		t.Fatalf("no go.mod two folders up from the test (%s): %v", root, err)
	}
	cmd := exec.Command(goCommand(t), append([]string{"list", "-json=ImportPath,Imports,Standard"}, args...)...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var out []listedPackage
	dec := json.NewDecoder(&stdout)
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		t.Fatalf("go list %s lists nothing", strings.Join(args, " "))
	}
	return out
}

type listedPackage struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

func paths(pkgs []listedPackage) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = p.ImportPath
	}
	return out
}

// TestLayers checks that no package of the module imports one of a layer
// above its own (tests aside: they may reach up to build what they test).
func TestLayers(t *testing.T) {
	imports := map[string][]string{}
	for _, p := range goList(t, "./...") {
		imports[p.ImportPath] = p.Imports
	}
	if len(imports) < 10 {
		t.Fatalf("go list ./... lists only %d packages", len(imports))
	}
	for _, v := range layerViolations(imports) {
		t.Error(v)
	}
}

// TestPureStateMachine checks that the state machine depends on no other
// package of the module but the JSON writers of internal/jsonappend,
// which depend on the standard library alone, and on nothing of Raft.
func TestPureStateMachine(t *testing.T) {
	deps := paths(goList(t, "-deps", "./fsm"))
	for _, v := range depViolations("fsm", deps, func(rel string) bool { return rel == "fsm" || rel == "internal/jsonappend" },
		[]string{"github.com/hashicorp/raft"}) {
		t.Error(v)
	}
	for _, p := range goList(t, "-deps", "./internal/jsonappend") {
		if !p.Standard && p.ImportPath != module+"/internal/jsonappend" {
			t.Errorf("internal/jsonappend depends on %s; it may use the standard library only", p.ImportPath)
		}
	}
}

// TestLightSDK checks that the Go SDK depends on no package of the module
// but its own and on none of the server's modules, and that its wire
// types depend on the standard library alone.
func TestLightSDK(t *testing.T) {
	deps := paths(goList(t, "-deps", "./client/..."))
	sdk := func(rel string) bool { return rel == "client" || strings.HasPrefix(rel, "client/") }
	for _, v := range depViolations("the SDK (client/...)", deps, sdk, serverModules) {
		t.Error(v)
	}
	for _, p := range goList(t, "-deps", "./client/wire") {
		if !p.Standard && p.ImportPath != module+"/client/wire" {
			t.Errorf("client/wire depends on %s; it may use the standard library only", p.ImportPath)
		}
	}
}

// TestChecksFail feeds the checks imports that run the wrong way, so that
// they are known to fail when they should.
func TestChecksFail(t *testing.T) {
	bad := map[string][]string{
		module + "/transport":     {module + "/fsm", module + "/cluster"},
		module + "/cluster":       {module + "/api"},
		module + "/fsm":           {"encoding/json"},
		module + "/internal/tool": {module + "/client"},
		module + "/newthing":      nil,
	}
	got := strings.Join(layerViolations(bad), "\n")
	for _, want := range []string{
		"transport (layer transport) imports cluster (layer cluster, above it)",
		"cluster (layer cluster) imports api (layer api, above it)",
		"newthing is in no layer",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the layer check misses %q; it found:\n%s", want, got)
		}
	}
	if strings.Contains(got, "internal/tool") || strings.Contains(got, "fsm (") {
		t.Errorf("the layer check flags an import that runs down:\n%s", got)
	}
	deps := []string{module + "/client", module + "/fsm", "github.com/hashicorp/raft", "github.com/hashicorp/raftish", "net/http"}
	v := depViolations("sdk", deps, func(rel string) bool { return rel == "client" }, serverModules)
	if want := []string{"sdk depends on fsm", "sdk depends on github.com/hashicorp/raft"}; !slices.Equal(v, want) {
		t.Errorf("the dependency check found %q, want %q", v, want)
	}
}
