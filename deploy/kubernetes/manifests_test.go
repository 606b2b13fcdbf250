package kubernetes

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/lib/testutil"
)

// kustomization is the part of kustomize's Kustomization the base uses;
// unknown fields fail the strict decode.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	Resources          []string    `json:"resources"`
	ConfigMapGenerator []generator `json:"configMapGenerator"`
	SecretGenerator    []generator `json:"secretGenerator"`
	Images             []struct {
		Name   string `json:"name"`
		NewTag string `json:"newTag"`
	} `json:"images"`
}

type generator struct {
	Name  string   `json:"name"`
	Files []string `json:"files"`
}

// manifests is every object of the base, strictly decoded into the API types.
type manifests struct {
	k           kustomization
	deployments []appsv1.Deployment
	services    []corev1.Service
	namespaces  []corev1.Namespace
}

func load(t *testing.T) manifests {
	t.Helper()
	base := filepath.Join(testutil.RepoRoot(t), "deploy", "kubernetes", "base")
	var m manifests
	b, err := os.ReadFile(filepath.Join(base, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &m.k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if m.k.Kind != "Kustomization" || m.k.Namespace != "robinhood" {
		t.Fatalf("kustomization.yaml: kind %q namespace %q", m.k.Kind, m.k.Namespace)
	}
	for _, g := range m.k.ConfigMapGenerator {
		for _, f := range g.Files {
			if _, err := os.Stat(filepath.Join(base, f)); err != nil {
				t.Errorf("configMapGenerator %s: %v", g.Name, err)
			}
		}
	}
	for _, r := range m.k.Resources {
		b, err := os.ReadFile(filepath.Join(base, r))
		if err != nil {
			t.Fatalf("resource %s: %v", r, err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s document %d: %v", r, i, err)
			}
			where := fmt.Sprintf("%s document %d (%s)", r, i, head.Kind)
			var err error
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				var d appsv1.Deployment
				err = yaml.UnmarshalStrict([]byte(doc), &d)
				m.deployments = append(m.deployments, d)
			case "v1 Service":
				var s corev1.Service
				err = yaml.UnmarshalStrict([]byte(doc), &s)
				m.services = append(m.services, s)
			case "v1 Namespace":
				var n corev1.Namespace
				err = yaml.UnmarshalStrict([]byte(doc), &n)
				m.namespaces = append(m.namespaces, n)
			default:
				t.Fatalf("%s: no decoder for %s %s (add one to this test)", where, head.APIVersion, head.Kind)
			}
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		}
	}
	return m
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// flagsOf lists the flags a binary's -h output names.
func flagsOf(t *testing.T, argv ...string) map[string]bool {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(argv[0], append(argv[1:], "-h")...)
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // -h exits 0 or 2 depending on the flag package
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--?([a-z][a-z0-9-]*)`).FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		t.Fatalf("%v -h lists no flags:\n%s", argv, out.String())
	}
	return flags
}

// checkArgs fails for an argument --NAME that the binary does not have.
func checkArgs(t *testing.T, where string, args []string, flags map[string]bool) {
	t.Helper()
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !flags[name] {
				t.Errorf("%s: %s is not a flag of the binary", where, a)
			}
		}
	}
}

// argValue is the value after flag in args ("" when absent).
func argValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, _ := strconv.Atoi(p)
	return int32(n)
}

// containerPort resolves a probe's or Service's port (number or name) in c.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) || (p.Type == intstr.String && cp.Name == p.StrVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func hasPort(c corev1.Container, port int32) bool {
	_, ok := containerPort(c, intstr.FromInt32(port))
	return ok
}

// TestManifests decodes every manifest strictly into the Kubernetes API types
// and checks them against the binaries and the topology they mount: every
// flag exists, every listen address and probe port is a declared container
// port, every Service reaches a declared port of the pods it selects, every
// topology address names a Service port (or, for memcached, a sidecar of the
// app server's own pod), every volume's ConfigMap or Secret is generated, and
// every container has resource requests, limits and probes.
func TestManifests(t *testing.T) {
	m := load(t)
	root := testutil.RepoRoot(t)
	topo, err := config.LoadTopology(filepath.Join(root, "deploy", "kubernetes", "base", "topology.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if topo.Auth == nil || topo.TLS == nil {
		t.Fatal("the Kubernetes topology must use tokens and TLS (its listeners are not loopback)")
	}
	flags := map[string]map[string]bool{}
	for _, b := range []string{"rbcserver", "backend", "appserver"} {
		flags[b] = flagsOf(t, testutil.Binary(t, "./"+map[string]string{
			"rbcserver": "rbcserver/cmd/rbcserver", "backend": "backends/cmd/backend", "appserver": "appserver/cmd/appserver"}[b]))
	}
	ctl := filepath.Join(root, ".venv", "bin", "robinhood-controller")
	if _, err := os.Stat(ctl); err != nil {
		t.Skipf("%s is missing: run 'make venv' (make test does)", ctl)
	}
	flags["robinhood-controller"] = flagsOf(t, ctl, "run")

	generated := map[string]bool{}
	for _, g := range append(m.k.ConfigMapGenerator, m.k.SecretGenerator...) {
		generated[g.Name] = true
	}
	secretFiles := map[string]bool{}
	for _, g := range m.k.SecretGenerator {
		for _, f := range g.Files {
			secretFiles[filepath.Base(f)] = true
		}
	}
	// The topology's secret paths are files of the generated Secret.
	for _, p := range []string{topo.Auth.Tokens, topo.TLS.CA, topo.TLS.Cert, topo.TLS.Key} {
		if !secretFiles[filepath.Base(p)] {
			t.Errorf("topology file %s is not in the secretGenerator", p)
		}
	}
	for _, a := range topo.AppServers {
		if p := strings.ReplaceAll(topo.Auth.Token, "{id}", a.ID); !secretFiles[filepath.Base(p)] {
			t.Errorf("app server %s's token %s is not in the secretGenerator", a.ID, p)
		}
	}
	if !secretFiles["operator.token"] || !secretFiles["prometheus.token"] {
		t.Error("the secretGenerator lacks operator.token or prometheus.token")
	}

	// The project's images are built locally (docs/kubernetes.md) with the tag
	// latest, which Kubernetes would otherwise always pull (and fail to find).
	for _, d := range m.deployments {
		for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
			if strings.HasPrefix(c.Image, "robinhood/") && c.ImagePullPolicy != corev1.PullIfNotPresent && c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("%s/%s: image %s has imagePullPolicy %q: a locally built image needs IfNotPresent or Never",
					d.Name, c.Name, c.Image, c.ImagePullPolicy)
			}
		}
	}

	// The credentials volume is read through fsGroup (mode 0440): the
	// project's containers that mount it accept group-readable secrets
	// explicitly (docs/security.md, "Files").
	for _, d := range m.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			mounts := false
			for _, v := range c.VolumeMounts {
				mounts = mounts || v.Name == "credentials"
			}
			allowed := false
			for _, e := range c.Env {
				allowed = allowed || (e.Name == auth.AllowSharedEnv && e.Value == "1")
			}
			if strings.HasPrefix(c.Image, "robinhood/") && mounts && !allowed {
				t.Errorf("%s/%s reads the group-readable credentials volume without %s=1", d.Name, c.Name, auth.AllowSharedEnv)
			}
		}
	}

	svcPorts := map[string]bool{} // "name:port" of every Service port
	for _, s := range m.services {
		var pods []corev1.PodSpec
		for _, d := range m.deployments {
			if selects(s.Spec.Selector, d.Spec.Template.Labels) {
				pods = append(pods, d.Spec.Template.Spec)
			}
		}
		if len(pods) == 0 {
			t.Errorf("Service %s selects no Deployment's pods", s.Name)
		}
		for _, p := range s.Spec.Ports {
			svcPorts[fmt.Sprintf("%s:%d", s.Name, p.Port)] = true
			for _, pod := range pods {
				found := false
				for _, c := range pod.Containers {
					if _, ok := containerPort(c, p.TargetPort); ok {
						found = true
					}
				}
				if !found {
					t.Errorf("Service %s port %s: target %s is no container port of its pods", s.Name, p.Name, p.TargetPort.String())
				}
			}
		}
	}
	for _, d := range m.deployments {
		if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("Deployment %s: its selector does not match its pods' labels", d.Name)
		}
		pod := d.Spec.Template.Spec
		vols := map[string]bool{}
		for _, v := range pod.Volumes {
			vols[v.Name] = true
			switch {
			case v.ConfigMap != nil && !generated[v.ConfigMap.Name]:
				t.Errorf("Deployment %s volume %s: ConfigMap %s is not generated", d.Name, v.Name, v.ConfigMap.Name)
			case v.Secret != nil && !generated[v.Secret.SecretName]:
				t.Errorf("Deployment %s volume %s: Secret %s is not generated", d.Name, v.Name, v.Secret.SecretName)
			}
		}
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("Deployment %s: pods must run as non-root", d.Name)
		}
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			where := d.Name + "/" + c.Name
			for _, vm := range c.VolumeMounts {
				if !vols[vm.Name] {
					t.Errorf("%s: mounts volume %s the pod does not have", where, vm.Name)
				}
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() ||
				c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: needs cpu and memory requests and limits", where)
			}
		}
		for _, c := range pod.Containers {
			where := d.Name + "/" + c.Name
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: needs readiness and liveness probes", where)
			}
			for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
				if pr == nil {
					continue
				}
				var port intstr.IntOrString
				switch {
				case pr.HTTPGet != nil:
					port = pr.HTTPGet.Port
					if pr.HTTPGet.Path != "/healthz" && c.Name != "prometheus" {
						t.Errorf("%s: probe path %s, want /healthz", where, pr.HTTPGet.Path)
					}
					if c.Name != "prometheus" && pr.HTTPGet.Scheme != corev1.URISchemeHTTPS {
						t.Errorf("%s: the topology serves TLS, the probe must use HTTPS", where)
					}
				case pr.TCPSocket != nil:
					port = pr.TCPSocket.Port
				}
				if _, ok := containerPort(c, port); !ok {
					t.Errorf("%s: probe port %s is not a container port", where, port.String())
				}
			}
			bin := ""
			if len(c.Command) > 0 {
				bin = c.Command[0]
			}
			if f, ok := flags[bin]; ok {
				checkArgs(t, where, c.Args, f)
				if argValue(c.Args, "--topology") != "/etc/robinhood/topology/topology.yaml" {
					t.Errorf("%s: --topology must be the mounted ConfigMap", where)
				}
				for _, fl := range []string{"--grpc-addr", "--http-addr"} {
					if a := argValue(c.Args, fl); a != "" && !hasPort(c, portOf(t, a)) {
						t.Errorf("%s: %s %s is not a container port", where, fl, a)
					}
				}
				if slices.Contains(c.Args, "--insecure") {
					t.Errorf("%s: --insecure: the deployment uses tokens", where)
				}
			}
			switch bin {
			case "appserver":
				id := argValue(c.Args, "--id")
				a, ok := topo.AppServer(id)
				if !ok {
					t.Fatalf("%s: --id %s is not an app server of the topology", where, id)
				}
				if !svcPorts[a.HTTP] {
					t.Errorf("%s: the topology's http %s is no Service port", where, a.HTTP)
				}
				// Its partitions are cache sidecars of this pod (memcached or
				// Redis), and its controller runs here too. Each starts at the
				// controller's floor (the first tick adopts the configured split,
				// docs/reliability.md) and has the memory for the largest limit
				// the controller can give it: the budget less the others' floors.
				largest := a.CacheBudgetMB - (len(a.Partitions)-1)*a.Controller.MinPartitionMB
				for name, p := range a.Partitions {
					sc := sidecar(pod, portOf(t, p.Endpoint()), p.Store())
					if sc == nil {
						t.Errorf("%s: partition %s at %s: no %s sidecar listens there", where, name, p.Endpoint(), p.Store())
						continue
					}
					if start := startMB(sc); start < 0 || start > a.Controller.MinPartitionMB {
						t.Errorf("%s: partition %s starts at %d MB, want at most the floor min_partition_mb = %d",
							where, name, start, a.Controller.MinPartitionMB)
					}
					limitMiB := sc.Resources.Limits.Memory().Value() >> 20
					if need := int64(largest) + sidecarOverheadMiB; limitMiB < need {
						t.Errorf("%s: partition %s: memory limit %d MiB, but the controller may set its limit to %d MB (budget %d less %d floors of %d): want at least %d MiB",
							where, name, limitMiB, largest, a.CacheBudgetMB, len(a.Partitions)-1, a.Controller.MinPartitionMB, need)
					}
				}
				ctlFound := false
				for _, o := range pod.Containers {
					if len(o.Command) > 0 && o.Command[0] == "robinhood-controller" && argValue(o.Args, "--id") == id {
						ctlFound = true
						if !hasPort(o, portOf(t, a.Controller.Metrics)) {
							t.Errorf("%s: controller metrics %s is not a container port", where, a.Controller.Metrics)
						}
					}
				}
				if !ctlFound {
					t.Errorf("%s: no controller for %s in the pod", where, id)
				}
			case "backend":
				b, ok := topo.BackendByName(argValue(c.Args, "--id"))
				if !ok {
					t.Fatalf("%s: --id is not a backend of the topology", where)
				}
				i, _ := strconv.Atoi(argValue(c.Args, "--replica"))
				r := b.Replicas[i]
				if !svcPorts[r.GRPC] || !svcPorts[r.HTTP] {
					t.Errorf("%s: the topology's addresses %s, %s are not Service ports", where, r.GRPC, r.HTTP)
				}
			case "rbcserver":
				if !svcPorts[topo.RBCServer.GRPC] || !svcPorts[topo.RBCServer.HTTP] {
					t.Errorf("%s: rbc_server addresses are not Service ports", where)
				}
			}
		}
	}
	// Every backend replica and app server of the topology is deployed.
	deployed := map[string]bool{}
	for _, d := range m.deployments {
		deployed[d.Name] = true
	}
	for _, b := range topo.Backends {
		for i := range b.Replicas {
			if n := fmt.Sprintf("backend-%s-%d", b.Name, i); !deployed[n] {
				t.Errorf("backend %s replica %d: no Deployment %s", b.Name, i, n)
			}
		}
	}
	for _, a := range topo.AppServers {
		if !deployed[a.ID] {
			t.Errorf("app server %s: no Deployment", a.ID)
		}
	}
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// sidecarOverheadMiB is what a cache sidecar holds beyond its item memory
// (connections, hash table, slab bookkeeping or Redis' own structures).
const sidecarOverheadMiB = 32

// sidecar is the cache container of pod that listens on 127.0.0.1:port and
// declares the port: a memcached (-l, -p) or a Redis (--bind, --port), as
// store says; nil if there is none.
func sidecar(pod corev1.PodSpec, port int32, store string) *corev1.Container {
	for i, c := range pod.Containers {
		var host, p string
		switch {
		case store == config.StoreMemcached && strings.HasPrefix(c.Image, "memcached"):
			host, p = argValue(c.Args, "-l"), argValue(c.Args, "-p")
		case store == config.StoreRedis && strings.HasPrefix(c.Image, "redis"):
			host, p = argValue(c.Args, "--bind"), argValue(c.Args, "--port")
		default:
			continue
		}
		if host == "127.0.0.1" && p == strconv.Itoa(int(port)) && hasPort(c, port) {
			return &pod.Containers[i]
		}
	}
	return nil
}

// startMB is the memory limit a cache sidecar starts with, in MB: memcached's
// -m or Redis' --maxmemory (in mb); -1 when it is not given or not in MB.
func startMB(c *corev1.Container) int {
	v := argValue(c.Args, "-m")
	if strings.HasPrefix(c.Image, "redis") {
		v = strings.TrimSuffix(strings.ToLower(argValue(c.Args, "--maxmemory")), "mb")
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}
