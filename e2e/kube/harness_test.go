//go:build kube

package kube

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/magnetar-io/magnetar/internal/testutil"
)

// harness is the kubelet of one node for the pods of a bookie
// StatefulSet: it schedules them on its node (their schedulerName is its
// own), starts a real `magnetar bookie` process for each one, reports the
// pod Running and Ready as the bookie's /readyz says, stops the process
// when the pod is deleted (SIGTERM, as a kubelet would) and then removes
// the pod. A process that exits on its own is started again, as a
// kubelet restarts a container. A pod's data directory outlives it, as a retained volume
// claim would. It keeps its Node's lease renewed, so the node lifecycle
// controller leaves its pods alone.
type harness struct {
	t         *testing.T
	cp        *controlPlane
	ns        string
	node      string
	scheduler string
	metastore string
	dataRoot  string

	mu    sync.Mutex
	procs map[string]*bookieProc // by pod name

	cancel context.CancelFunc
	done   chan struct{}
}

type bookieProc struct {
	uid      string
	cmd      *exec.Cmd
	http     string
	log      string
	exited   chan struct{}
	restarts int32 // of this pod's container before this process
	gaveUp   bool  // it exited after maxBookieRestarts: reported, not restarted
}

// maxBookieRestarts is how often the harness restarts a pod's bookie that
// exited (a port taken before it bound it) before it fails the test.
const maxBookieRestarts = 3

func startHarness(t *testing.T, cp *controlPlane, ns, metastore string) *harness {
	h := &harness{t: t, cp: cp, ns: ns, node: "harness-" + ns, scheduler: "magnetar-harness", metastore: metastore,
		dataRoot: t.TempDir(), procs: map[string]*bookieProc{}, done: make(chan struct{})}
	ctx := context.Background()
	// Tainted: the scheduler places no other pod on it (the harness binds
	// its own pods itself); deleted when the harness stops.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.node, Labels: map[string]string{"kubernetes.io/hostname": h.node}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "magnetar.io/harness", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := cp.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.heartbeat(ctx)
	var runCtx context.Context
	runCtx, h.cancel = context.WithCancel(ctx)
	go h.run(runCtx)
	t.Cleanup(h.stop)
	return h
}

// heartbeat reports the node Ready and renews its lease.
func (h *harness) heartbeat(ctx context.Context) {
	now := metav1.Now()
	n, err := h.cp.client.CoreV1().Nodes().Get(ctx, h.node, metav1.GetOptions{})
	if err == nil {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "HarnessReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: mustQuantity("100"), corev1.ResourceCPU: mustQuantity("8"), corev1.ResourceMemory: mustQuantity("32Gi")}
		n.Status.Allocatable = n.Status.Capacity
		h.cp.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	}
	leases := h.cp.client.CoordinationV1().Leases("kube-node-lease")
	l, err := leases.Get(ctx, h.node, metav1.GetOptions{})
	micro := metav1.NewMicroTime(time.Now())
	if apierrors.IsNotFound(err) {
		leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: h.node},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(h.node), LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &micro}}, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.RenewTime = &micro
		leases.Update(ctx, l, metav1.UpdateOptions{})
	}
}

func (h *harness) run(ctx context.Context) {
	defer close(h.done)
	beat := time.NewTicker(5 * time.Second)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			h.heartbeat(ctx)
		case <-time.After(100 * time.Millisecond):
		}
		pods, err := h.cp.client.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range pods.Items {
			h.sync(ctx, &pods.Items[i])
		}
	}
}

// sync moves one pod towards what a kubelet would make of it.
func (h *harness) sync(ctx context.Context, pod *corev1.Pod) {
	pods := h.cp.client.CoreV1().Pods(h.ns)
	if pod.Spec.SchedulerName != h.scheduler {
		return
	}
	h.mu.Lock()
	p := h.procs[pod.Name]
	h.mu.Unlock()
	switch {
	case pod.DeletionTimestamp != nil:
		if p != nil {
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				p.cmd.Process.Kill()
				<-p.exited
			}
			h.mu.Lock()
			delete(h.procs, pod.Name)
			h.mu.Unlock()
		}
		pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		return
	case pod.Spec.NodeName == "":
		pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: h.node}}, metav1.CreateOptions{})
		return
	case pod.Spec.NodeName != h.node:
		return
	}
	restarts := int32(0)
	if p != nil && p.uid == string(pod.UID) {
		select {
		case <-p.exited:
			// The container died: a kubelet restarts it (restartPolicy
			// Always), on the same data, and counts the restart. New
			// ports, as the old ones may have been taken meanwhile (the
			// usual cause: a port found free was taken before the bookie
			// bound it).
			out, _ := os.ReadFile(p.log)
			if len(out) > 2000 {
				out = out[len(out)-2000:]
			}
			if p.restarts >= maxBookieRestarts {
				// A bookie that keeps dying is a failure, not a flake.
				if !p.gaveUp {
					p.gaveUp = true
					h.t.Errorf("bookie of pod %s exited again (%v) after %d restarts; its log ends:\n%s", pod.Name, p.cmd.ProcessState, p.restarts, out)
				}
				return
			}
			h.t.Logf("bookie of pod %s exited (%v); restarting it. Its log ends:\n%s", pod.Name, p.cmd.ProcessState, out)
			restarts = p.restarts + 1
			p = nil
		default:
		}
	}
	if p == nil || p.uid != string(pod.UID) {
		if p != nil { // a new pod under the same name: the old process goes
			p.cmd.Process.Kill()
			<-p.exited
		}
		var err error
		if p, err = h.startBookie(pod); err != nil {
			h.t.Errorf("start bookie for pod %s: %v", pod.Name, err)
			return
		}
		p.restarts = restarts
		h.mu.Lock()
		h.procs[pod.Name] = p
		h.mu.Unlock()
	}
	ready := false
	select {
	case <-p.exited:
	default:
		c := http.Client{Timeout: time.Second}
		if resp, err := c.Get("http://" + p.http + "/readyz"); err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
	}
	if pod.Status.Phase == corev1.PodRunning && podReady(pod) == ready &&
		len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].RestartCount == p.restarts {
		return
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, HostIP: "127.0.0.1", PodIP: "127.0.0.1", StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, Ready: ready,
			RestartCount: p.restarts, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func localAddr() (string, error) { return testutil.FreePortOn("127.0.0.1") }

// startBookie runs `magnetar bookie` as pod's container would, with the
// pod's name as the bookie id (as the chart does) and 127.0.0.1 ports.
func (h *harness) startBookie(pod *corev1.Pod) (*bookieProc, error) {
	addr, err := localAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := localAddr()
	if err != nil {
		return nil, err
	}
	p := &bookieProc{uid: string(pod.UID), http: httpAddr, log: filepath.Join(h.dataRoot, pod.Name+".log"), exited: make(chan struct{})}
	log, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(magnetarBin, "bookie", "--id", pod.Name, "--listen", addr, "--http", httpAddr,
		"--data-dir", filepath.Join(h.dataRoot, pod.Name), "--metastore", h.metastore,
		"--registration-interval", "1s", "--gc-interval", "1s", "--lost-bookie-recovery-delay", "5s",
		"--host-label", pod.Name, "--log-level", "info")
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	go func() { p.cmd.Wait(); log.Close(); close(p.exited) }()
	return p, nil
}

// stop ends the harness, kills every bookie it started and removes its
// node.
func (h *harness) stop() {
	h.cancel()
	<-h.done
	h.cp.client.CoreV1().Nodes().Delete(context.Background(), h.node, metav1.DeleteOptions{})
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, p := range h.procs {
		p.cmd.Process.Kill()
		<-p.exited
		if h.t.Failed() {
			out, _ := os.ReadFile(p.log)
			if len(out) > 20000 {
				out = out[len(out)-20000:]
			}
			h.t.Logf("--- bookie %s:\n%s", name, out)
		}
	}
	h.procs = map[string]*bookieProc{}
}
