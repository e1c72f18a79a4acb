//go:build kube

// Package kube tests the Helm chart (charts/magnetar) and the bookie
// autoscaler on a real Kubernetes control plane built from the module
// proxy (tools/kube): kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok's fake nodes, started by the tests on
// 127.0.0.1. scripts/kube-tools.sh builds them once into .bin/kube.
package kube

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/testutil"
)

// tools holds the Kubernetes binaries, magnetarBin the magnetar binary.
var tools, magnetarBin string

func TestMain(m *testing.M) {
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tools = filepath.Join(root, ".bin", "kube")
	build := exec.Command(filepath.Join(root, "scripts", "kube-tools.sh"), tools)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the Kubernetes tools:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "magnetar-kube-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	magnetarBin = filepath.Join(dir, "magnetar")
	b := exec.Command("go", "build", "-o", magnetarBin, "../../cmd/magnetar")
	b.Stdout, b.Stderr = os.Stderr, os.Stderr
	if err := b.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build magnetar:", err)
		os.Exit(1)
	}
	code := m.Run()
	if cp := sharedPlane.cp; cp != nil {
		cp.stop()
		os.RemoveAll(cp.dir)
	}
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(append(testutil.GoleakIgnores(),
			// client-go's and klog's process-wide background goroutines.
			goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
			goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Type).updateUnfinishedWorkLoop"),
		)...); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}
