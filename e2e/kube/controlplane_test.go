//go:build kube

package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// controlPlane is a real Kubernetes control plane on 127.0.0.1: an etcd
// (embedded), kube-apiserver, kube-controller-manager, kube-scheduler and
// kwok, which runs fake nodes (pods scheduled on them are "running" with
// nothing in them). No kubelet, no container runtime, no downloads.
type controlPlane struct {
	dir        string
	etcd       *metastore.Embedded
	procs      []*proc
	server     string // https://127.0.0.1:PORT
	kubeconfig string
	client     kubernetes.Interface
}

const adminToken = "magnetar-test-admin-token"

func freePort() (string, error) {
	addr, err := testutil.FreePortOn("127.0.0.1")
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	return port, nil
}

// startControlPlane starts everything under dir, with nodes fake nodes.
func startControlPlane(ctx context.Context, tools, dir string, nodes int) (_ *controlPlane, err error) {
	cp := &controlPlane{dir: dir}
	defer func() {
		if err != nil {
			cp.stop()
		}
	}()
	cp.etcd, err = metastore.StartEmbedded(ctx, metastore.EmbeddedConfig{Dir: filepath.Join(dir, "etcd"), ClientAddr: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	// The service account signing key.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	files := map[string][]byte{
		"sa.key":     keyPEM,
		"sa.pub":     pubPEM,
		"tokens.csv": []byte(adminToken + ",admin,admin,system:masters\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cp.server = "https://127.0.0.1:" + port
	certs := filepath.Join(dir, "certs")
	if err := cp.start(tools, "kube-apiserver",
		"--etcd-servers="+cp.etcd.Endpoints()[0],
		"--etcd-prefix=/kube",
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+port,
		"--cert-dir="+certs,
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	); err != nil {
		return nil, err
	}
	if err := cp.waitAPIServer(ctx); err != nil {
		return nil, err
	}
	cp.kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: admin, namespace: default}
current-context: test
`, cp.server, adminToken)
	if err := os.WriteFile(cp.kubeconfig, []byte(kc), 0o600); err != nil {
		return nil, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cp.kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 100, 200
	if cp.client, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, err
	}
	if err := cp.start(tools, "kube-controller-manager",
		"--kubeconfig="+cp.kubeconfig,
		"--service-account-private-key-file="+filepath.Join(dir, "sa.key"),
		"--root-ca-file="+filepath.Join(certs, "apiserver.crt"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--controllers=*",
		"--concurrent-statefulset-syncs=5",
	); err != nil {
		return nil, err
	}
	if err := cp.start(tools, "kube-scheduler",
		"--kubeconfig="+cp.kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
	); err != nil {
		return nil, err
	}
	// kwok's stages, with a pod taking a second to turn ready: long enough
	// for a test to see a rolling update take one pod at a time.
	stages, err := os.ReadFile(filepath.Join(tools, "kwok-stages.yaml"))
	if err != nil {
		return nil, err
	}
	const ready = "  name: pod-ready\nspec:\n"
	if !strings.Contains(string(stages), ready) {
		return nil, fmt.Errorf("no pod-ready stage in kwok-stages.yaml")
	}
	stages = []byte(strings.Replace(string(stages), ready, ready+"  delay:\n    durationMilliseconds: 1000\n", 1))
	if err := os.WriteFile(filepath.Join(dir, "kwok-stages.yaml"), stages, 0o644); err != nil {
		return nil, err
	}
	if err := cp.start(tools, "kwok",
		"--kubeconfig="+cp.kubeconfig,
		"--config="+filepath.Join(dir, "kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/16",
		"--node-ip=10.0.0.1",
		"--node-lease-duration-seconds=40",
		"--server-address=127.0.0.1:0",
	); err != nil {
		return nil, err
	}
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("kwok-node-%d", i)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"type": "kwok", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3)},
		}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: mustQuantity("32"), corev1.ResourceMemory: mustQuantity("256Gi"), corev1.ResourcePods: mustQuantity("110"),
		}, Capacity: corev1.ResourceList{
			corev1.ResourceCPU: mustQuantity("32"), corev1.ResourceMemory: mustQuantity("256Gi"), corev1.ResourcePods: mustQuantity("110"),
		}}}
		if _, err := cp.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create node %s: %w", name, err)
		}
	}
	// kwok marks its nodes ready; the default service account of a
	// namespace must exist before pods can be created in it.
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		ns, err := cp.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range ns.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready < nodes {
			return false, nil
		}
		_, err = cp.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("nodes ready and service accounts: %w\n%s", err, cp.logs())
	}
	return cp, nil
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
}

func (cp *controlPlane) start(tools, name string, args ...string) error {
	log, err := os.Create(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(tools, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); log.Close(); close(p.done) }()
	cp.procs = append(cp.procs, p)
	return nil
}

func (cp *controlPlane) waitAPIServer(ctx context.Context) error {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err := poll(ctx, 90*time.Second, func() (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cp.server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := c.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready: %w\n%s", err, cp.logs())
	}
	return nil
}

// logs is the tail of every component's log, for a failure.
func (cp *controlPlane) logs() string {
	var b strings.Builder
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		out, err := os.ReadFile(filepath.Join(cp.dir, name+".log"))
		if err != nil {
			continue
		}
		// kwok logs each node lease renewal: noise that would push
		// everything else out of the tail.
		var keep [][]byte
		for _, line := range bytes.Split(out, []byte("\n")) {
			if !bytes.Contains(line, []byte(`"msg":"Syncing lease"`)) {
				keep = append(keep, line)
			}
		}
		out = bytes.Join(keep, []byte("\n"))
		if len(out) > 12000 {
			out = out[len(out)-12000:]
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", name, out)
	}
	return b.String()
}

// stop ends every process it started (by pid) and etcd.
func (cp *controlPlane) stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	cp.procs = nil
	if cp.etcd != nil {
		cp.etcd.Close()
		cp.etcd = nil
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var sharedPlane struct {
	once sync.Once
	cp   *controlPlane
	err  error
}

// plane is the package's control plane, started by the first test that
// needs it and stopped by TestMain.
func plane(t *testing.T) *controlPlane {
	t.Helper()
	sharedPlane.once.Do(func() {
		dir, err := os.MkdirTemp("", "magnetar-kube-")
		if err != nil {
			sharedPlane.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		sharedPlane.cp, sharedPlane.err = startControlPlane(ctx, tools, dir, 3)
		t.Logf("control plane with 3 kwok nodes started in %v", time.Since(start).Round(time.Millisecond))
	})
	if sharedPlane.err != nil {
		t.Fatal(sharedPlane.err)
	}
	return sharedPlane.cp
}

// dumpOnFailure registers a cleanup that, if the test failed, logs what a
// person would look at: the pods (phase, node, conditions), volume claims,
// nodes, the namespace's last events and the components' logs.
func dumpOnFailure(t *testing.T, cp *controlPlane, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var b strings.Builder
		if pods, err := cp.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, p := range pods.Items {
				fmt.Fprintf(&b, "pod %s: %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
				for _, c := range p.Status.Conditions {
					fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Reason)
				}
				b.WriteString("\n")
			}
		}
		if pvcs, err := cp.client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, c := range pvcs.Items {
				fmt.Fprintf(&b, "claim %s: %s on %q\n", c.Name, c.Status.Phase, c.Spec.VolumeName)
			}
		}
		if nodes, err := cp.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
			for _, n := range nodes.Items {
				fmt.Fprintf(&b, "node %s: taints %v", n.Name, n.Spec.Taints)
				for _, c := range n.Status.Conditions {
					fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
				}
				b.WriteString("\n")
			}
		}
		if evs, err := cp.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
			items := evs.Items
			if len(items) > 60 {
				items = items[len(items)-60:]
			}
			for _, e := range items {
				fmt.Fprintf(&b, "event %s %s/%s %s: %s\n", e.LastTimestamp.Format(time.TimeOnly), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
		// The summary last, so that it is what a truncated log still shows.
		t.Logf("--- the control plane's logs:\n%s", cp.logs())
		t.Logf("--- the cluster at the failure:\n%s", b.String())
	})
}
