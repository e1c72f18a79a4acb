//go:build kube

package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/e2e/check"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// startProcess runs the magnetar binary with args until the test ends
// (killed then, by pid), its output shown if the test failed.
func startProcess(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(magnetarBin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			if len(out) > 30000 {
				out = out[len(out)-30000:]
			}
			t.Logf("--- %s:\n%s", name, out)
		}
	})
	return cmd
}

// The autoscaler on the real API server, acting on real bookies: a
// harness runs a `magnetar bookie` process for each pod of the bookie
// StatefulSet. Under produce load it scales up, and the new bookie takes
// new ledgers; when the load stops it scales down through decommission
// (the drained bookie's copies move, then its pod goes, then its name is
// forgotten); every decision is an Event on the StatefulSet; at the end
// the checker finds every acknowledged message, none lost.
func TestAutoscalerScalesRealBookies(t *testing.T) {
	cp := plane(t)
	ctx := context.Background()
	// The names the chart gives (release "rel"): the autoscaler runs as
	// the chart's service account, with the chart's Role.
	const ns, stsName = "magnetar-autoscale", "rel-magnetar-bookie"
	if _, err := cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dumpOnFailure(t, cp, ns)
	kubeconfig := chartServiceAccount(t, cp, ns)
	etcd := testutil.StartEtcd(t)
	store := testutil.OpenStore(t, etcd.Endpoints(), "/magnetar")
	h := startHarness(t, cp, ns, etcd.Endpoints()[0])
	labels := map[string]string{"app": stsName}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: stsName},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(3)), ServiceName: stsName, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SchedulerName:                 h.scheduler,
					TerminationGracePeriodSeconds: ptr.To(int64(30)),
					Containers:                    []corev1.Container{{Name: "bookie", Image: "magnetar/magnetar:dev"}},
				},
			},
		},
	}
	if _, err := cp.client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplicas := func(want int32, timeout time.Duration) {
		t.Helper()
		if err := poll(ctx, timeout, func() (bool, error) {
			s, err := cp.client.AppsV1().StatefulSets(ns).Get(ctx, stsName, metav1.GetOptions{})
			return err == nil && *s.Spec.Replicas == want && s.Status.ReadyReplicas == want && s.Status.Replicas == want, nil
		}); err != nil {
			t.Fatalf("waiting for %d ready bookies: %v", want, err)
		}
	}
	waitReplicas(3, time.Minute)

	brokerAddr, _ := localAddr()
	brokerHTTP, _ := localAddr()
	startProcess(t, "broker", "broker", "--listen", brokerAddr, "--http", brokerHTTP, "--metastore", etcd.Endpoints()[0],
		"--ensemble", "3", "--write-quorum", "3", "--ack-quorum", "2",
		"--min-ledger-rollover", "1s", "--max-ledger-rollover", "3s", "--log-level", "warn")
	waitHTTP(t, brokerHTTP)
	autoscalerArgs := []string{"autoscaler", "--kubeconfig", kubeconfig, "--namespace", ns, "--statefulset", stsName,
		"--lease", "rel-magnetar-autoscaler", "--lease-duration", "3s", "--metastore", etcd.Endpoints()[0],
		"--interval", "1s", "--window", "3s", "--cooldown", "5s", "--min-bookies", "3", "--max-bookies", "4",
		"--scale-up-write-bytes-per-sec", "20000", "--scale-down-write-bytes-per-sec", "2000",
		"--scale-up-disk-usage", "0.999", "--scale-down-disk-usage", "0.998"}
	// First a dry run: it decides and says so, and changes nothing.
	dry := startProcess(t, "autoscaler-dry-run", append(autoscalerArgs, "--id", "autoscaler-dry-run", "--dry-run")...)

	// The workload: one producer at a steady rate on a partitioned topic;
	// "all" exists before the first send and is read whole at the end.
	const topic, partitions = "persistent://public/default/autoscale", 4
	createPartitioned(t, brokerHTTP, "public/default/autoscale", partitions)
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + brokerAddr, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	all, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "all", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	all.Close()
	histPath := filepath.Join(t.TempDir(), "history.jsonl")
	hf, err := os.Create(histPath)
	if err != nil {
		t.Fatal(err)
	}
	hist, err := check.NewWriter(hf, check.Meta{Scenario: "autoscale", Partitions: partitions, Subscriptions: []string{"all"}, Started: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var sends sync.WaitGroup
	sends.Add(1)
	go func() {
		defer sends.Done()
		var pending sync.WaitGroup
		defer pending.Wait()
		tick := time.NewTicker(2 * time.Millisecond) // 500 msg/s of 512 bytes
		defer tick.Stop()
		pad := strings.Repeat("x", 500)
		for seq := int64(1); ; seq++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			value, key, start := fmt.Sprintf("as-%d-%s", seq, pad), fmt.Sprintf("k%d", seq%16), time.Now()
			pending.Add(1)
			p.SendAsync(ctx, &client.ProducerMessage{Key: key, Payload: []byte(value)}, func(id client.MessageID, _ *client.ProducerMessage, err error) {
				defer pending.Done()
				ev := check.Event{Producer: "p", Seq: seq, Key: key, Value: value, Start: start.UnixNano(), End: time.Now().UnixNano(), Result: "ok"}
				if err != nil {
					ev.Result, ev.Error = "unknown", err.Error()
				} else {
					ev.ID = &check.MsgID{Partition: id.PartitionIdx(), Ledger: id.LedgerID(), Entry: id.EntryID(), Batch: id.BatchIdx()}
				}
				if err := hist.Send(ev); err != nil {
					t.Error(err)
				}
			})
		}
	}()

	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		events, err := cp.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + stsName + ",reason=DryRunScaleUp"})
		return err == nil && len(events.Items) > 0, nil
	}); err != nil {
		t.Fatalf("no DryRunScaleUp event under load: %v", err)
	}
	if s, err := cp.client.AppsV1().StatefulSets(ns).Get(ctx, stsName, metav1.GetOptions{}); err != nil || *s.Spec.Replicas != 3 {
		t.Fatalf("the dry run changed the replicas: %v", err)
	}
	// The dry run stops; the real one takes the Lease over once it
	// expires, and acts.
	dry.Process.Signal(syscall.SIGTERM)
	startProcess(t, "autoscaler", append(autoscalerArgs, "--id", "autoscaler-test")...)

	// Under load: one more bookie, and it takes new ledgers.
	waitReplicas(4, 2*time.Minute)
	if err := poll(ctx, time.Minute, func() (bool, error) {
		st, err := autorecovery.Bookies(ctx, store)
		if err != nil {
			return false, nil
		}
		for _, b := range st {
			if b.ID == stsName+"-3" && b.Ledgers > 0 {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the new bookie took no ledger: %v", err)
	}
	t.Logf("scaled up to 4; %s-3 holds ledgers", stsName)
	// When the replicas go back to 3, the bookie removed must hold nothing
	// already: drained first, removed after.
	atScaleIn := make(chan autorecovery.BookieStatus, 1)
	go func() {
		for {
			s, err := cp.client.AppsV1().StatefulSets(ns).Get(ctx, stsName, metav1.GetOptions{})
			if err == nil && *s.Spec.Replicas == 3 {
				st, _ := autorecovery.Bookies(ctx, store)
				for _, b := range st {
					if b.ID == stsName+"-3" {
						atScaleIn <- b
						return
					}
				}
				atScaleIn <- autorecovery.BookieStatus{ID: "gone already"}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	close(stop)
	sends.Wait()
	p.Close()

	// No load: back to 3 through decommission, and bk-3 forgotten.
	waitReplicas(3, 3*time.Minute)
	if b := <-atScaleIn; b.State != autorecovery.StateDecommissioned || b.Ledgers != 0 {
		t.Fatalf("when the replicas went down, the bookie removed was %+v", b)
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		st, err := autorecovery.Bookies(ctx, store)
		if err != nil {
			return false, nil
		}
		for _, b := range st {
			if b.ID == stsName+"-3" {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the removed bookie was not forgotten: %v", err)
	}
	// Every decision is an Event, in this order. Events are sent after
	// the action, asynchronously: wait for each of them (the dry run's
	// events count towards no total).
	order := []string{"ScaleUp", "Decommission", "ScaleDown", "Forget"}
	var seen map[string]corev1.Event
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		events, err := cp.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + stsName})
		if err != nil {
			return false, nil
		}
		seen = map[string]corev1.Event{}
		for _, e := range events.Items {
			if e.Source.Component == "magnetar-autoscaler" {
				seen[e.Reason] = e
			}
		}
		for _, want := range order {
			if _, ok := seen[want]; !ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("autoscaler events: %v", seen)
	}
	for i, want := range order {
		e, ok := seen[want]
		if !ok {
			t.Fatalf("no %s event; events: %v", want, seen)
		}
		if i == 0 {
			continue
		}
		if prev := seen[order[i-1]]; e.FirstTimestamp.Before(&prev.FirstTimestamp) {
			t.Fatalf("%s (%v) before %s (%v)", want, e.FirstTimestamp, order[i-1], prev.FirstTimestamp)
		}
	}
	if s, _ := cp.client.AppsV1().StatefulSets(ns).Get(ctx, stsName, metav1.GetOptions{}); s.Annotations["magnetar.io/autoscaler-draining"] != "" {
		t.Fatalf("the draining mark stayed: %v", s.Annotations)
	}
	for _, r := range order {
		t.Logf("event %s: %s", r, seen[r].Message)
	}

	// Every acknowledged message is there.
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "all"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := cons.Receive(rctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		id := m.ID()
		if err := hist.Recv(check.Event{Sub: "all", SubType: "exclusive", Consumer: "all-0", Time: time.Now().UnixNano(), Key: m.Key(), Value: string(m.Payload()),
			ID: &check.MsgID{Partition: id.PartitionIdx(), Ledger: id.LedgerID(), Entry: id.EntryID(), Batch: id.BatchIdx()}}); err != nil {
			t.Fatal(err)
		}
		cons.Ack(m)
	}
	hist.Close()
	hf.Close()
	hh, err := check.ReadFile(histPath)
	if err != nil {
		t.Fatal(err)
	}
	report := check.Check(hh)
	t.Logf("checker report:\n%s", report.Text())
	if !report.Pass() {
		t.Fatalf("the checker failed: %v", report.Failures())
	}
	if report.Totals.Sends["ok"] < 1000 {
		t.Fatalf("only %d messages acknowledged: the load was not a load", report.Totals.Sends["ok"])
	}
}

func waitHTTP(t *testing.T, addr string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, addr+" ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func createPartitioned(t *testing.T, admin, topic string, n int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+admin+"/admin/v2/persistent/"+topic+"/partitions", strings.NewReader(fmt.Sprint(n)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("create %s: %s", topic, resp.Status)
	}
}

// chartServiceAccount creates the autoscaler's ServiceAccount, Role and
// RoleBinding as the chart renders them (release "rel" in ns) and returns
// a kubeconfig that acts as that service account (impersonated by the
// admin): the autoscaler gets exactly the chart's permissions.
func chartServiceAccount(t *testing.T, cp *controlPlane, ns string) string {
	t.Helper()
	ctx := context.Background()
	out := mustHelm(t, nil, "template", "rel", chart, "-n", ns, "--show-only", "templates/autoscaler.yaml")
	for _, doc := range strings.Split(out, "\n---") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		var err error
		switch head.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			if err = yaml.Unmarshal([]byte(doc), &o); err == nil {
				_, err = cp.client.CoreV1().ServiceAccounts(ns).Create(ctx, &o, metav1.CreateOptions{})
			}
		case "Role":
			var o rbacv1.Role
			if err = yaml.Unmarshal([]byte(doc), &o); err == nil {
				_, err = cp.client.RbacV1().Roles(ns).Create(ctx, &o, metav1.CreateOptions{})
			}
		case "RoleBinding":
			var o rbacv1.RoleBinding
			if err = yaml.Unmarshal([]byte(doc), &o); err == nil {
				_, err = cp.client.RbacV1().RoleBindings(ns).Create(ctx, &o, metav1.CreateOptions{})
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", head.Kind, err)
		}
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: autoscaler
  user: {token: %q, as: "system:serviceaccount:%s:rel-magnetar-autoscaler"}
contexts:
- name: test
  context: {cluster: test, user: autoscaler}
current-context: test
`, cp.server, adminToken, ns)
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}
