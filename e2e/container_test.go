package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// The container tests build the images with `make image` (CI builds what
// it runs: nothing can be pulled) under this tag, so that a developer's
// own magnetar/magnetar:dev is left alone.
const (
	testImageTag = "e2e"
	testImage    = "magnetar/magnetar:" + testImageTag
)

var images struct {
	once sync.Once
	etcd string // the etcd image, tagged with the pinned version
	err  error
}

// needImages builds the images once per test binary. Docker is part of
// every machine this project runs its tests on; MAGNETAR_SKIP_DOCKER=1
// skips these tests where it is not (and says so).
func needImages(t *testing.T) {
	t.Helper()
	if os.Getenv("MAGNETAR_SKIP_DOCKER") != "" {
		t.Skip("MAGNETAR_SKIP_DOCKER is set: the container tests do not run")
	}
	images.once.Do(func() {
		out, err := exec.Command("make", "-C", "..", "image", "IMAGE_TAG="+testImageTag).CombinedOutput()
		if err != nil {
			images.err = fmt.Errorf("make image: %v\n%s", err, out)
			return
		}
		v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/server/v3").Output()
		if err != nil {
			images.err = fmt.Errorf("etcd version: %v", err)
			return
		}
		images.etcd = "magnetar/etcd:" + strings.TrimSpace(string(v))
	})
	if images.err != nil {
		t.Fatal(images.err)
	}
}

// docker runs the docker CLI and returns its trimmed output; it fails the
// test on an error.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitReady waits until http://addr/readyz answers 200 (connection errors
// included while the process starts).
func waitReady(t *testing.T, addr string, timeout time.Duration) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	testutil.Eventually(t, timeout, addr+"/readyz answering 200", func() bool {
		resp, err := c.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func freePort(t *testing.T) string {
	_, port, _ := net.SplitHostPort(freePortOn(t, "127.0.0.1"))
	return port
}

// The image as a user meets it: `docker run` of magnetar standalone with
// its data in a named volume; produce and consume from the host; stop,
// run a new container on the same volume: the messages and the
// subscription's acknowledgements are still there; kill -9 the container:
// every acknowledged message is still there. The image runs as a non-root
// user.
func TestImageStandalone(t *testing.T) {
	needImages(t)
	cfg := docker(t, "image", "inspect", "--format", "{{.Config.User}} {{json .Config.Volumes}} {{json .Config.Entrypoint}}", testImage)
	if cfg != `10001:10001 {"/data":{}} ["/usr/local/bin/magnetar"]` {
		t.Fatalf("image config: %s", cfg)
	}
	name := fmt.Sprintf("magnetar-e2e-smoke-%d", os.Getpid())
	vol := name
	docker(t, "volume", "create", vol)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", "--tail", "200", name).CombinedOutput()
			t.Logf("--- the container's last output:\n%s", out)
		}
		exec.Command("docker", "rm", "-f", name).Run()
		exec.Command("docker", "volume", "rm", "-f", vol).Run()
	})
	port, admin := freePort(t), freePort(t)
	run := func() {
		t.Helper()
		docker(t, "run", "-d", "--name", name,
			"-p", "127.0.0.1:"+port+":6650", "-p", "127.0.0.1:"+admin+":8080", "-v", vol+":/data",
			testImage, "standalone", "--data-dir", "/data", "--broker-listen", "0.0.0.0:6650", "--http", "0.0.0.0:8080",
			"--advertised-address", "127.0.0.1:"+port)
		waitReady(t, "127.0.0.1:"+admin, 60*time.Second)
	}
	run()
	if uid := docker(t, "top", name, "-o", "pid,uid"); !strings.HasSuffix(uid, " 10001") || strings.Count(uid, "\n") != 1 {
		t.Fatalf("the container's processes run as:\n%s", uid)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "persistent://public/default/smoke"
	connect := func() client.Client {
		t.Helper()
		cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://127.0.0.1:" + port, OperationTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	send := func(cl client.Client, from, n int) {
		t.Helper()
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := from; i < from+n; i++ {
			if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%03d", i))}); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	// receive reads n messages on sub, checks they are from, from+1, ...,
	// and acknowledges them if ack.
	receive := func(cl client.Client, sub string, from, n int, ack bool) {
		t.Helper()
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: sub, SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := from; i < from+n; i++ {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatalf("%s: receive %d: %v", sub, i, err)
			}
			if got, want := string(m.Payload()), fmt.Sprintf("m-%03d", i); got != want {
				t.Fatalf("%s: got %s, want %s", sub, got, want)
			}
			if ack {
				if err := c.Ack(m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	cl := connect()
	send(cl, 0, 50)
	receive(cl, "app", 0, 50, true)
	cl.Close()

	// A clean stop, then a new container on the same volume.
	docker(t, "stop", "-t", "30", name)
	docker(t, "rm", name)
	run()
	cl = connect()
	receive(cl, "everything", 0, 50, false) // all still stored
	send(cl, 50, 50)
	receive(cl, "app", 50, 50, false) // its acknowledgements kept too
	cl.Close()

	// kill -9: every acknowledged message survives.
	docker(t, "kill", "-s", "KILL", name)
	docker(t, "rm", name)
	run()
	cl = connect()
	defer cl.Close()
	receive(cl, "after-kill", 0, 100, false)
}

// composeCluster is deploy/compose.yaml brought up under its own project
// name, network and host ports.
type composeCluster struct {
	t       *testing.T
	project string
	net     string // first three bytes of the /24
	env     []string
	brokers []string // published client addresses on the host
	admins  []string // published admin addresses
}

func startCompose(t *testing.T) *composeCluster {
	needImages(t)
	c := &composeCluster{t: t, project: fmt.Sprintf("magnetare2e%d", os.Getpid()), net: os.Getenv("MAGNETAR_E2E_NET")}
	if c.net == "" {
		c.net = freeSubnet(t)
	}
	c.env = append(os.Environ(), "COMPOSE_PROJECT_NAME="+c.project, "MAGNETAR_NET="+c.net,
		"MAGNETAR_IMAGE="+testImage, "ETCD_IMAGE="+images.etcd, "MAGNETAR_BIND=127.0.0.1")
	for i := 1; i <= 2; i++ {
		bp, ap := freePort(t), freePort(t)
		c.env = append(c.env, fmt.Sprintf("MAGNETAR_PORT_BROKER_%d=%s", i, bp), fmt.Sprintf("MAGNETAR_PORT_ADMIN_%d=%s", i, ap))
		c.brokers = append(c.brokers, "127.0.0.1:"+bp)
		c.admins = append(c.admins, "127.0.0.1:"+ap)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.composeErr("logs", "--no-color", "--tail", "100")
			t.Logf("--- the containers' last output:\n%s", out)
		}
		if out, err := c.composeErr("down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})
	c.compose("up", "-d")
	for _, a := range c.admins {
		waitReady(t, a, 2*time.Minute)
	}
	// The bookies' probe ports are not published: the host reaches them
	// on the private network, as it reaches the brokers after a lookup.
	for i := 1; i <= 4; i++ {
		waitReady(t, fmt.Sprintf("%s.%d:8000", c.net, 20+i), 2*time.Minute)
	}
	return c
}

// freeSubnet returns the first three bytes of a /24 under 10.213.8.0/21
// that no Docker network on this host uses, so the cluster's fixed
// addresses do not overlap another project's network (another run's, or
// one a killed run left behind; those are not ours to remove). Two runs
// that pick at the same moment can still pick the same one: the second's
// "up" then fails with "Pool overlaps".
func freeSubnet(t *testing.T) string {
	t.Helper()
	var used []*net.IPNet
	for _, id := range strings.Fields(docker(t, "network", "ls", "-q")) {
		// A network removed since the listing is simply not in use.
		out, err := exec.Command("docker", "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}", id).Output()
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(out)) {
			if _, n, err := net.ParseCIDR(s); err == nil {
				used = append(used, n)
			}
		}
	}
	for i := 8; i < 16; i++ {
		cand := fmt.Sprintf("10.213.%d", i)
		_, want, _ := net.ParseCIDR(cand + ".0/24")
		free := true
		for _, n := range used {
			if n.Contains(want.IP) || want.Contains(n.IP) {
				free = false
				break
			}
		}
		if free {
			return cand
		}
	}
	t.Fatalf("no free /24 in 10.213.8.0/21 for the compose network; Docker networks in use: %v", used)
	return ""
}

func (c *composeCluster) composeErr(args ...string) (string, error) {
	cmd := exec.Command("docker-compose", append([]string{"-f", "../deploy/compose.yaml"}, args...)...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *composeCluster) compose(args ...string) {
	c.t.Helper()
	if out, err := c.composeErr(args...); err != nil {
		c.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (c *composeCluster) brokerURL() string { return "magnetar://" + strings.Join(c.brokers, ",") }

func (c *composeCluster) clientOptions() client.ClientOptions {
	return client.ClientOptions{URL: c.brokerURL(), OperationTimeout: 30 * time.Second}
}

func (c *composeCluster) createPartitionedTopic(topic string, n int) {
	c.t.Helper()
	createPartitionedTopic(c.t, c.admins[0], topic, n)
}

// deploy/compose.yaml runs a real cluster: a client in a container on its
// network and one on the host produce and consume through it; under the
// fault suite's workload, a broker container and a bookie container are
// killed (SIGKILL) and started again, and every acknowledged message is
// delivered to every subscription.
func TestComposeCluster(t *testing.T) {
	c := startCompose(t)

	// Across containers: a client container on the private network
	// produces through broker-2, the host consumes.
	docker(t, "run", "--rm", "--network", c.project+"_net", testImage,
		"client", "produce", "compose-hello", "-m", "from-a-container", "-n", "3", "--url", "magnetar://broker-2:6650")
	cl, err := client.NewClient(client.ClientOptions{URL: c.brokerURL(), OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "compose-hello", SubscriptionName: "host", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		m, err := cons.Receive(ctx)
		if err != nil || string(m.Payload()) != "from-a-container" {
			t.Fatalf("message %d from the container: %v %v", i, m, err)
		}
	}
	cons.Close()

	// Two faults, one after the other, however long docker takes (under
	// load a kill and a start took 23 s in CI): the workload runs until
	// both are done.
	prof := shortProfile
	w := newWorkload(t, c, "compose", prof)
	report := w.run(func(context.Context) {
		for _, target := range []string{"broker-1", "bookie-2"} {
			time.Sleep(5 * time.Second)
			start := time.Now()
			c.compose("kill", "-s", "SIGKILL", target)
			time.Sleep(5 * time.Second)
			c.compose("start", target)
			w.fault("kill-container", target, start, time.Now())
			t.Logf("kill -9 of container %s: started again after %v", target, time.Since(start).Round(time.Millisecond))
		}
	})
	t.Logf("checker report:\n%s", report.Text())
	if report.Totals.Faults != 2 {
		t.Errorf("%d faults in the history, want 2", report.Totals.Faults)
	}
	if !report.Pass() {
		for _, reason := range report.Failures() {
			t.Error(reason)
		}
	}
	for _, a := range report.Availability {
		if a.MaxSec < 0 {
			t.Errorf("%s of %s at %.1fs: partition %d never took a write again", a.Name, a.Target, a.StartSec, a.MaxPartition)
		}
	}
	if t.Failed() {
		t.Errorf("history and report kept in %s", w.dir)
	}
}
