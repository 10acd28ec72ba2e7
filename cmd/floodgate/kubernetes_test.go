package main

import (
	"cmp"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// manifest is what the test reads of a Kubernetes object.
type manifest struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				SecurityContext               securityContext `yaml:"securityContext"`
				TerminationGracePeriodSeconds *int            `yaml:"terminationGracePeriodSeconds"`
				Containers                    []struct {
					Name            string          `yaml:"name"`
					SecurityContext securityContext `yaml:"securityContext"`
					ReadinessProbe  *probe          `yaml:"readinessProbe"`
					LivenessProbe   *probe          `yaml:"livenessProbe"`
					Lifecycle       struct {
						PreStop *struct {
							Sleep *struct {
								Seconds int `yaml:"seconds"`
							} `yaml:"sleep"`
							Exec any `yaml:"exec"`
						} `yaml:"preStop"`
					} `yaml:"lifecycle"`
					Env []struct {
						Name  string `yaml:"name"`
						Value string `yaml:"value"`
					} `yaml:"env"`
					Ports []struct {
						Name string `yaml:"name"`
						Port int    `yaml:"containerPort"`
					} `yaml:"ports"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Ports []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

// securityContext is what the test reads of a pod's or container's.
type securityContext struct {
	RunAsNonRoot *bool `yaml:"runAsNonRoot"`
	RunAsUser    *int  `yaml:"runAsUser"`
}

// probe is what the test reads of a container's probe.
type probe struct {
	GRPC    any `yaml:"grpc"`
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// The Kubernetes manifests of deploy/kubernetes hold together: every
// document is an object with a kind and a name; the floodgate ConfigMap's
// limits load; the service accepts the Deployment's environment; its pods
// tell Prometheus where /metrics is; each Service targets a port its
// Deployment names; floodgate's pod passes admission, drains and is
// probed as checkFloodgatePod says; and Envoy's configuration asks
// floodgate's Service on its gRPC port.
func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) != 3 {
		t.Fatalf("manifests %v, %v; want floodgate, envoy and redis", files, err)
	}
	objects := map[string]manifest{} // by kind/name
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(r)
		for {
			var m manifest
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if m.APIVersion == "" || m.Kind == "" || m.Metadata.Name == "" {
				t.Errorf("%s: an object without apiVersion, kind or name: %+v", f, m)
			}
			objects[m.Kind+"/"+m.Metadata.Name] = m
		}
		r.Close()
	}
	files2 := map[string][]byte{}
	for name, body := range objects["ConfigMap/floodgate-config"].Data {
		files2[name] = []byte(body)
	}
	cfg, err := rlconfig.Parse(files2, rlconfig.Options{})
	if err != nil || len((*rlmatch.Config)(cfg).Limits()) != 2 {
		t.Fatalf("floodgate-config: %v, %v; want two limits", cfg, err)
	}
	dep := objects["Deployment/floodgate"].Spec.Template.Spec.Containers
	if len(dep) != 1 {
		t.Fatalf("floodgate Deployment containers %+v", dep)
	}
	env := map[string]string{}
	for _, e := range dep[0].Env {
		env[e.Name] = e.Value
	}
	serve, err := parseServe(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the service refuses the Deployment's environment: %v", err)
	}
	// Prometheus scrapes each pod where its annotations say: the port of
	// the listener that serves /metrics (the debug one when it is set), on
	// an address other pods reach, and one the container declares.
	metrics := cmp.Or(serve.DebugAddr, serve.HTTPAddr)
	host, port, err := net.SplitHostPort(metrics)
	if ip := net.ParseIP(host); err != nil || host == "localhost" || ip != nil && ip.IsLoopback() {
		t.Errorf("/metrics is served on %q, which Prometheus cannot reach from another pod", metrics)
	}
	ann := objects["Deployment/floodgate"].Spec.Template.Metadata.Annotations
	declared := false
	for _, p := range dep[0].Ports {
		declared = declared || strconv.Itoa(p.Port) == port
	}
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port || ann["prometheus.io/path"] != "/metrics" || !declared {
		t.Errorf("pod annotations %v, container ports %+v; want Prometheus pointed at /metrics on port %s, which the container declares", ann, dep[0].Ports, port)
	}
	checkFloodgatePod(t, objects["Deployment/floodgate"], serve)
	for _, app := range []string{"floodgate", "envoy", "redis"} {
		named := map[string]bool{}
		for _, c := range objects["Deployment/"+app].Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				named[p.Name] = true
			}
		}
		svc, ok := objects["Service/"+app]
		if !ok || len(svc.Spec.Ports) == 0 {
			t.Errorf("no Service %s with ports", app)
		}
		for _, p := range svc.Spec.Ports {
			if !named[p.TargetPort] {
				t.Errorf("Service %s targets port %q, which its Deployment does not name (%v)", app, p.TargetPort, named)
			}
		}
	}
	envoy := objects["ConfigMap/envoy-config"].Data["envoy.yaml"]
	var parsed map[string]any
	if err := yaml.Unmarshal([]byte(envoy), &parsed); err != nil || parsed["static_resources"] == nil {
		t.Fatalf("envoy-config's envoy.yaml: %v", err)
	}
	if !strings.Contains(envoy, "address: floodgate, port_value: 8081") {
		t.Errorf("envoy.yaml does not ask the floodgate Service on 8081")
	}
}

// checkFloodgatePod: floodgate's pod starts under runAsNonRoot (the user
// a number, as the image's is: a named one cannot be verified and the
// pod is refused), is drained before the listeners close (a preStop
// sleep, within the grace period with SHUTDOWN_TIMEOUT after it), and is
// probed on /healthcheck on the plaintext HTTP port: a kubelet's grpc
// probe speaks no TLS, so one on the gRPC port never passes once
// GRPC_SERVER_USE_TLS is on.
func checkFloodgatePod(t *testing.T, dep manifest, serve serveConfig) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	nonRoot := pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot ||
		c.SecurityContext.RunAsNonRoot != nil && *c.SecurityContext.RunAsNonRoot
	user := cmp.Or(c.SecurityContext.RunAsUser, pod.SecurityContext.RunAsUser)
	if !nonRoot || user == nil || *user == 0 {
		t.Errorf("floodgate's pod: runAsNonRoot %v, runAsUser %v; want runAsNonRoot with a numeric user other than 0", nonRoot, user)
	}
	dockerfile, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(dockerfile), "\n") {
		if u, ok := strings.CutPrefix(line, "USER "); ok && user != nil {
			if id, _, _ := strings.Cut(u, ":"); id != strconv.Itoa(*user) {
				t.Errorf("deploy/Dockerfile: %q; want the runAsUser of the manifest, %d, by number", line, *user)
			}
		}
	}
	pre := c.Lifecycle.PreStop
	if pre == nil || pre.Exec != nil || pre.Sleep == nil || pre.Sleep.Seconds <= 0 {
		t.Errorf("floodgate's container: preStop %+v; want a sleep (the image has no shell for exec)", pre)
	} else if grace := pod.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= time.Duration(pre.Sleep.Seconds)*time.Second+serve.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v; want more than the preStop sleep (%ds) and SHUTDOWN_TIMEOUT (%v)", grace, pre.Sleep.Seconds, serve.ShutdownTimeout)
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.Port
	}
	_, httpPort, _ := net.SplitHostPort(serve.HTTPAddr)
	for name, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.GRPC != nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthcheck" ||
			strconv.Itoa(cmp.Or(ports[p.HTTPGet.Port], -1)) != httpPort && p.HTTPGet.Port != httpPort {
			t.Errorf("floodgate's %s probe %+v; want GET /healthcheck on HTTP_ADDR's port %s, plaintext whatever GRPC_SERVER_USE_TLS says", name, p, httpPort)
		}
	}
}
