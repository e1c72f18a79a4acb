//go:build kube

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chart = "../../charts/magnetar"

// helm runs the helm binary against the control plane (if any), with its
// own configuration and cache folders.
func helm(t *testing.T, cp *controlPlane, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(tools, "helm"), args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache", "HELM_DATA_HOME="+home+"/data")
	if cp != nil {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+cp.kubeconfig)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustHelm(t *testing.T, cp *controlPlane, args ...string) string {
	t.Helper()
	out, err := helm(t, cp, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// valueSets are the configurations the chart is checked with.
var valueSets = []struct {
	name string
	set  []string
}{
	{"default", nil},
	{"external-etcd", []string{"etcd.enabled=false", "etcd.endpoints={etcd-a.example:2379,http://etcd-b.example:2379}", "etcd.root=/team-a",
		"dashboards.enabled=true"}},
	{"autorecovery-deployment", []string{"autorecovery.mode=deployment", "autorecovery.replicas=2", "autoscaler.enabled=false", "brokers.hpa.enabled=false", "bookies.podAntiAffinity=hard"}},
}

func setArgs(set []string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// objects splits rendered manifests into objects, by "Kind/name".
func objects(t *testing.T, manifests string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(manifests, "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		out[fmt.Sprintf("%s/%s", o["kind"], md["name"])] = o
	}
	return out
}

// schemas writes JSON schemas of every kind the API server serves, from
// its /openapi/v2, in kubeconform's layout (<kind>-<group>-<version>.json),
// strict: an object with declared properties allows no others.
func schemas(t *testing.T, cp *controlPlane) string {
	t.Helper()
	raw, err := cp.client.Discovery().RESTClient().Get().AbsPath("/openapi/v2").SetHeader("Accept", "application/json").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for name, def := range doc.Definitions {
		doc.Definitions[name] = strictSchema(def).(map[string]any)
	}
	// Types that are a string or a number on the wire.
	for name := range doc.Definitions {
		if strings.HasSuffix(name, ".api.resource.Quantity") {
			doc.Definitions[name] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
		}
	}
	dir := t.TempDir()
	n := 0
	for name, def := range doc.Definitions {
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk := g.(map[string]any)
			group, _ := gvk["group"].(string)
			suffix := "-" + strings.ToLower(gvk["version"].(string))
			if group != "" {
				suffix = "-" + strings.ToLower(strings.Split(group, ".")[0]) + suffix
			}
			s := map[string]any{}
			for k, v := range def {
				s[k] = v
			}
			s["definitions"] = closure(doc.Definitions, name)
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, strings.ToLower(gvk["kind"].(string))+suffix+".json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n < 50 {
		t.Fatalf("only %d kinds in the API server's OpenAPI document", n)
	}
	return dir
}

// strictSchema forbids undeclared properties where properties are
// declared (and unknown fields are not explicitly preserved), and turns
// int-or-string into either.
func strictSchema(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x["format"] == "int-or-string" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		for k, e := range x {
			if k == "properties" {
				props := e.(map[string]any)
				for p, ps := range props {
					props[p] = strictSchema(ps)
				}
				continue
			}
			x[k] = strictSchema(e)
		}
		if _, ok := x["properties"]; ok {
			if _, set := x["additionalProperties"]; !set && x["x-kubernetes-preserve-unknown-fields"] != true {
				x["additionalProperties"] = false
			}
		}
		return x
	case []any:
		for i := range x {
			x[i] = strictSchema(x[i])
		}
	}
	return v
}

// closure is the definitions name refers to, directly or not.
func closure(defs map[string]map[string]any, name string) map[string]any {
	out := map[string]any{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				n := strings.TrimPrefix(ref, "#/definitions/")
				if _, seen := out[n]; !seen {
					out[n] = defs[n]
					walk(defs[n])
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(defs[name])
	return out
}

// The chart passes helm lint, and what it renders for each configuration
// passes kubeconform in strict mode against the schemas of the live API
// server; each configuration renders what it promises; a mistyped or
// invalid value is refused by values.schema.json.
func TestChartRendersValidObjects(t *testing.T) {
	cp := plane(t)
	dir := schemas(t, cp)
	kubeconform := func(manifests string) ([]byte, error) {
		cmd := exec.Command(filepath.Join(tools, "kubeconform"), "-strict", "-summary", "-output", "json",
			"-schema-location", filepath.Join(dir, "{{ .ResourceKind }}{{ .KindSuffix }}.json"), "-")
		cmd.Stdin = strings.NewReader(manifests)
		return cmd.CombinedOutput()
	}
	// The schemas are strict: an unknown field is an error.
	if out, err := kubeconform("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicaz: 2\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec: {containers: [{name: c, image: i}]}\n"); err == nil || !strings.Contains(string(out), "replicaz") {
		t.Fatalf("kubeconform accepted an unknown field: %v\n%s", err, out)
	}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			mustHelm(t, nil, append([]string{"lint", "--strict", chart}, setArgs(vs.set)...)...)
			manifests := mustHelm(t, nil, append([]string{"template", "rel", chart, "-n", "magnetar"}, setArgs(vs.set)...)...)
			out, err := kubeconform(manifests)
			if err != nil {
				t.Fatalf("kubeconform: %v\n%s", err, out)
			}
			var res struct {
				Summary struct{ Valid, Invalid, Errors, Skipped int } `json:"summary"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("kubeconform output: %v\n%s", err, out)
			}
			objs := objects(t, manifests)
			if s := res.Summary; s.Valid != len(objs) || s.Invalid+s.Errors+s.Skipped != 0 {
				t.Fatalf("kubeconform: %+v for %d objects\n%s", s, len(objs), out)
			}
			has := func(key string) bool { _, ok := objs[key]; return ok }
			bookieArgs := fmt.Sprint(objs["StatefulSet/rel-magnetar-bookie"]["spec"])
			switch vs.name {
			case "default":
				for _, k := range []string{"StatefulSet/rel-magnetar-etcd", "StatefulSet/rel-magnetar-bookie", "Deployment/rel-magnetar-broker",
					"Service/rel-magnetar-broker", "HorizontalPodAutoscaler/rel-magnetar-broker", "PodDisruptionBudget/rel-magnetar-broker",
					"PodDisruptionBudget/rel-magnetar-bookie", "Deployment/rel-magnetar-autoscaler", "Role/rel-magnetar-autoscaler",
					"RoleBinding/rel-magnetar-autoscaler", "ServiceAccount/rel-magnetar-autoscaler", "ConfigMap/rel-magnetar-broker",
					"ConfigMap/rel-magnetar-bookie"} {
					if !has(k) {
						t.Errorf("no %s", k)
					}
				}
				if !strings.Contains(bookieArgs, "--autorecovery=true") || has("Deployment/rel-magnetar-autorecovery") {
					t.Errorf("autorecovery is not inside the bookies by default")
				}
				if !strings.Contains(bookieArgs, "prometheus.io/scrape:true") || has("ConfigMap/rel-magnetar-dashboards") {
					t.Errorf("by default: scrape annotations on the bookies, no dashboards ConfigMap: %s", bookieArgs)
				}
			case "external-etcd":
				if has("StatefulSet/rel-magnetar-etcd") || !strings.Contains(bookieArgs, "etcd-a.example:2379,http://etcd-b.example:2379") || !strings.Contains(bookieArgs, "/team-a") {
					t.Errorf("external etcd: etcd StatefulSet %v, bookie spec %s", has("StatefulSet/rel-magnetar-etcd"), bookieArgs)
				}
				// The dashboards ConfigMap, for Grafana's sidecar.
				dash := fmt.Sprint(objs["ConfigMap/rel-magnetar-dashboards"])
				for _, want := range []string{"grafana_dashboard:1", "magnetar-cluster.json", "magnetar-topic.json", "magnetar-bookie.json"} {
					if !strings.Contains(dash, want) {
						t.Errorf("dashboards ConfigMap lacks %s: %.300s", want, dash)
					}
				}
			case "autorecovery-deployment":
				if !has("Deployment/rel-magnetar-autorecovery") || !strings.Contains(bookieArgs, "--autorecovery=false") ||
					has("Deployment/rel-magnetar-autoscaler") || has("HorizontalPodAutoscaler/rel-magnetar-broker") ||
					!strings.Contains(bookieArgs, "requiredDuringSchedulingIgnoredDuringExecution") {
					t.Errorf("autorecovery as a deployment: %v", objs)
				}
			}
		})
	}
	// values.schema.json refuses what would silently be ignored or break.
	for _, bad := range []struct{ set, want string }{
		{"bookies.replica=3", "replica"},
		{"autorecovery.mode=sidecar", "mode"},
		{"etcd.enabled=false", "endpoints"},
		{"brokers.config.Listen=x", "Listen"},
		{"bookies.persistence.whenScaledDown=Keep", "whenScaledDown"},
	} {
		out, err := helm(t, nil, "lint", chart, "--set", bad.set)
		if err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("helm lint --set %s: %v\n%s", bad.set, err, out)
		}
	}
}

// localVolumes makes a no-provisioner StorageClass and n hostPath volumes
// of size in it (there is no dynamic provisioner here).
func localVolumes(t *testing.T, cp *controlPlane, class string, n int, size string) {
	t.Helper()
	ctx := context.Background()
	mode := storagev1.VolumeBindingImmediate
	_, err := cp.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &mode,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", class, strings.ToLower(size), i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: mustQuantity(size)},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              class,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: fmt.Sprintf("/var/tmp/%s/%s-%d", class, size, i)}},
			},
		}
		if _, err := cp.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// helm install --wait on the control plane: every object as the chart
// describes it, volume claims bound to the volumes made for them, the
// test hook there; helm upgrade rolls brokers and bookies one at a time
// with readiness gating; helm uninstall removes everything but the
// bookies' and etcd's volume claims (data is never deleted by an
// uninstall).
func TestChartInstallUpgradeUninstall(t *testing.T) {
	cp := plane(t)
	ctx := context.Background()
	const ns = "magnetar-install"
	dumpOnFailure(t, cp, ns)
	if _, err := cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	localVolumes(t, cp, "install-local", 3, "1Gi")
	localVolumes(t, cp, "install-local", 5, "2Gi")
	values := []string{"etcd.persistence.storageClass=install-local", "etcd.persistence.size=1Gi",
		"bookies.persistence.storageClass=install-local", "bookies.persistence.size=2Gi"}
	start := time.Now()
	mustHelm(t, cp, append([]string{"install", "rel", chart, "-n", ns, "--wait", "--timeout", "5m"}, setArgs(values)...)...)
	t.Logf("helm install --wait: %v", time.Since(start).Round(time.Millisecond))

	apps := cp.client.AppsV1()
	for name, want := range map[string]int32{"rel-magnetar-etcd": 3, "rel-magnetar-bookie": 4} {
		sts, err := apps.StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || sts.Status.ReadyReplicas != want {
			t.Fatalf("StatefulSet %s: %v ready %d", name, err, sts.Status.ReadyReplicas)
		}
	}
	for name, want := range map[string]int32{"rel-magnetar-broker": 2, "rel-magnetar-autoscaler": 1} {
		d, err := apps.Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || d.Status.AvailableReplicas != want {
			t.Fatalf("Deployment %s: %v available %d", name, err, d.Status.AvailableReplicas)
		}
	}
	pvcs, err := cp.client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pvcs.Items) != 7 {
		t.Fatalf("claims: %v %d", err, len(pvcs.Items))
	}
	for _, c := range pvcs.Items {
		if c.Status.Phase != corev1.ClaimBound || !strings.HasPrefix(c.Spec.VolumeName, "install-local-") {
			t.Fatalf("claim %s: %s on %q", c.Name, c.Status.Phase, c.Spec.VolumeName)
		}
	}
	role, err := cp.client.RbacV1().Roles(ns).Get(ctx, "rel-magnetar-autoscaler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules := fmt.Sprint(role.Rules)
	for _, want := range []string{"statefulsets/scale", "leases", "rel-magnetar-bookie"} {
		if !strings.Contains(rules, want) {
			t.Fatalf("autoscaler role lacks %s: %s", want, rules)
		}
	}
	for _, forbidden := range []string{"secrets", "persistentvolumeclaims", "delete", "*"} {
		if strings.Contains(rules, forbidden) {
			t.Fatalf("autoscaler role grants %s: %s", forbidden, rules)
		}
	}
	if _, err := cp.client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "rel-magnetar-bookie", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	hpa, err := cp.client.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "rel-magnetar-broker", metav1.GetOptions{})
	if err != nil || hpa.Spec.MaxReplicas != 6 || *hpa.Spec.MinReplicas != 2 {
		t.Fatalf("HPA: %v %+v", err, hpa.Spec)
	}
	if hooks := mustHelm(t, cp, "get", "hooks", "rel", "-n", ns); !strings.Contains(hooks, "helm.sh/hook: test") || !strings.Contains(hooks, "produce") {
		t.Fatalf("helm test hook:\n%s", hooks)
	}
	if notes := mustHelm(t, cp, "get", "notes", "rel", "-n", ns); !strings.Contains(notes, "magnetar://rel-magnetar-broker."+ns+".svc:6650") {
		t.Fatalf("NOTES:\n%s", notes)
	}

	// The autoscaler and the HPA own the counts: scaled to 5 bookies and
	// 3 brokers, an upgrade keeps them (a rendered 4 would remove a bookie
	// without draining it).
	scaleTo := func(kind string, n int32) {
		t.Helper()
		var err error
		if kind == "StatefulSet" {
			sc, _ := apps.StatefulSets(ns).GetScale(ctx, "rel-magnetar-bookie", metav1.GetOptions{})
			sc.Spec.Replicas = n
			_, err = apps.StatefulSets(ns).UpdateScale(ctx, "rel-magnetar-bookie", sc, metav1.UpdateOptions{})
		} else {
			sc, _ := apps.Deployments(ns).GetScale(ctx, "rel-magnetar-broker", metav1.GetOptions{})
			sc.Spec.Replicas = n
			_, err = apps.Deployments(ns).UpdateScale(ctx, "rel-magnetar-broker", sc, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	scaleTo("StatefulSet", 5)
	scaleTo("Deployment", 3)
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		sts, err1 := apps.StatefulSets(ns).Get(ctx, "rel-magnetar-bookie", metav1.GetOptions{})
		d, err2 := apps.Deployments(ns).Get(ctx, "rel-magnetar-broker", metav1.GetOptions{})
		return err1 == nil && err2 == nil && sts.Status.ReadyReplicas == 5 && d.Status.AvailableReplicas == 3, nil
	}); err != nil {
		t.Fatalf("scaling to 5 bookies and 3 brokers: %v", err)
	}

	// An upgrade that changes both configurations rolls both: the bookies
	// one at a time (4 of 5 ready at the lowest, each pod takes a second
	// to turn ready), the brokers never below 3 available.
	oldBroker, _ := apps.Deployments(ns).Get(ctx, "rel-magnetar-broker", metav1.GetOptions{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	type lows struct{ bookies, brokers int32 }
	low := make(chan lows, 1)
	go func() {
		l := lows{5, 3}
		for watchCtx.Err() == nil {
			if sts, err := apps.StatefulSets(ns).Get(watchCtx, "rel-magnetar-bookie", metav1.GetOptions{}); err == nil {
				l.bookies = min(l.bookies, sts.Status.ReadyReplicas)
			}
			if d, err := apps.Deployments(ns).Get(watchCtx, "rel-magnetar-broker", metav1.GetOptions{}); err == nil {
				l.brokers = min(l.brokers, d.Status.AvailableReplicas)
			}
			time.Sleep(50 * time.Millisecond)
		}
		low <- l
	}()
	mustHelm(t, cp, append([]string{"upgrade", "rel", chart, "-n", ns, "--wait", "--timeout", "5m",
		"--set", "brokers.config.retention-time=2h", "--set", "bookies.config.gc-interval=2m"}, setArgs(values)...)...)
	if err := poll(ctx, 3*time.Minute, func() (bool, error) {
		sts, err := apps.StatefulSets(ns).Get(ctx, "rel-magnetar-bookie", metav1.GetOptions{})
		return err == nil && sts.Status.CurrentRevision == sts.Status.UpdateRevision && sts.Status.UpdatedReplicas == 5 && sts.Status.ReadyReplicas == 5, nil
	}); err != nil {
		t.Fatalf("the bookies' rolling update: %v", err)
	}
	stopWatch()
	if l := <-low; l.bookies != 4 || l.brokers != 3 {
		t.Fatalf("during the upgrade, at the lowest: %d of 5 bookies ready (want 4: one at a time), %d of 3 brokers available", l.bookies, l.brokers)
	}
	if sts, _ := apps.StatefulSets(ns).Get(ctx, "rel-magnetar-bookie", metav1.GetOptions{}); *sts.Spec.Replicas != 5 {
		t.Fatalf("the upgrade set the bookies to %d", *sts.Spec.Replicas)
	}
	if d, _ := apps.Deployments(ns).Get(ctx, "rel-magnetar-broker", metav1.GetOptions{}); *d.Spec.Replicas != 3 {
		t.Fatalf("the upgrade set the brokers to %d", *d.Spec.Replicas)
	}
	cm, err := cp.client.CoreV1().ConfigMaps(ns).Get(ctx, "rel-magnetar-broker", metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data["broker.yaml"], "retention-time: 2h") {
		t.Fatalf("broker config after the upgrade: %v %q", err, cm.Data)
	}
	newBroker, _ := apps.Deployments(ns).Get(ctx, "rel-magnetar-broker", metav1.GetOptions{})
	if newBroker.Spec.Template.Annotations["checksum/config"] == oldBroker.Spec.Template.Annotations["checksum/config"] {
		t.Fatal("the broker pods were not rolled by a configuration change")
	}
	if s := newBroker.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable.IntValue() != 0 || s.MaxSurge.IntValue() != 1 {
		t.Fatalf("broker rolling update: %+v", s)
	}

	// A bookie removed by a scale-in loses its claim (whenScaledDown:
	// Delete, the default): the autoscaler removes only drained bookies.
	scaleTo("StatefulSet", 4)
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		_, err := cp.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-rel-magnetar-bookie-4", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the removed bookie's claim: %v", err)
	}

	mustHelm(t, cp, "uninstall", "rel", "-n", ns, "--wait", "--timeout", "2m")
	for _, check := range []func() error{
		func() error {
			_, err := apps.StatefulSets(ns).Get(ctx, "rel-magnetar-bookie", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := apps.Deployments(ns).Get(ctx, "rel-magnetar-broker", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cp.client.RbacV1().Roles(ns).Get(ctx, "rel-magnetar-autoscaler", metav1.GetOptions{})
			return err
		},
	} {
		if err := check(); !apierrors.IsNotFound(err) {
			t.Fatalf("after uninstall: %v", err)
		}
	}
	if pvcs, err := cp.client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{}); err != nil || len(pvcs.Items) != 7 {
		t.Fatalf("claims after uninstall (kept): %v %d", err, len(pvcs.Items))
	}
}
