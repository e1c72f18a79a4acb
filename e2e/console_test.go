package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// chromium finds headless Chromium: $MAGNETAR_CHROMIUM, or Debian's
// package on the PATH.
func chromium(t *testing.T) string {
	if p := os.Getenv("MAGNETAR_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the console test needs headless Chromium: apt-get install chromium (or set MAGNETAR_CHROMIUM)")
	return ""
}

// The web console, opened in headless Chromium against a running
// standalone with authentication on: without a token it shows the API's
// refusal; with one it shows the cluster (brokers, bookies with state and
// disk), tenants, namespaces, a topic with its stats, live counters and
// subscriptions with their consumers; and its actions (create a topic,
// skip, reset a cursor, unload) change the cluster as the admin API
// reports it. Screenshots are saved in the test's artifact directory
// (go test -artifacts).
func TestConsole(t *testing.T) {
	browser := chromium(t)
	key := testutil.NewTokenKey(t)
	token := key.Token("operator", time.Hour)
	s := startStandalone(t, t.TempDir(), freePorts(t, 4),
		"--bookies", "2", "--authentication-enabled", "--token-secret-key", key.File)
	base := "http://" + s.httpAddr

	// Some traffic: 20 messages, a subscription holding them with a
	// connected consumer that does not acknowledge.
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.brokerAddr, Authentication: client.NewAuthenticationToken(token)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "orders", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := p.Send(context.Background(), &client.ProducerMessage{Payload: []byte(fmt.Sprint("order-", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(20)
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "orders", SubscriptionName: "audit", Name: "audit-reader",
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	apiGet := func(path string, out any) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	backlog := func() int64 {
		var st struct {
			Subscriptions map[string]struct {
				MsgBacklog int64 `json:"msgBacklog"`
			} `json:"subscriptions"`
		}
		apiGet("/admin/v2/persistent/public/default/orders/stats", &st)
		return st.Subscriptions["audit"].MsgBacklog
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelCtx()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll := func(js string) error {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(30*time.Second)))
		return err
	}
	// waitText waits until the element of sel holds want.
	waitText := func(sel, want string) {
		t.Helper()
		js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want)
		if err := poll(js); err != nil {
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || "(no element)"`, sel)))
			t.Fatalf("%s never showed %q: it shows %q (%v)", sel, want, got, err)
		}
	}
	goTo := func(hash string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`location.hash = %q`, hash))); err != nil {
			t.Fatalf("go to %s: %v", hash, err)
		}
		if err := poll(fmt.Sprintf(`document.body.dataset.ready === %q`, hash)); err != nil {
			t.Fatalf("%s did not render: %v", hash, err)
		}
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.ArtifactDir(), name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

	// Without a token the API refuses, and the console says so.
	run("open the console", chromedp.Navigate(base+"/console/"))
	waitText("#view", "no credentials")
	// With one, the cluster.
	run("set the token", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS(`#token-form button`)))
	waitText("#clusters", "standalone")
	waitText("#brokers", s.brokerAddr)
	waitText("#bookies", "standalone-bookie-0")
	waitText("#bookies", "standalone-bookie-1")
	waitText("#bookies", "writable")
	waitText("#bookies", "%") // disk used
	waitText("#bookie-count", "2")
	screenshot("console-cluster.png")

	goTo("#/tenants")
	waitText("#tenants", "public")
	goTo("#/tenant/public")
	waitText("#namespaces", "public/default")
	goTo("#/ns/public/default")
	waitText("#topics", "persistent://public/default/orders")
	// Create a topic.
	run("create a topic", chromedp.SendKeys(chromedp.CSS("#new-topic"), "created-in-console"),
		chromedp.Click(chromedp.CSS(`button[data-action="create-topic"]`)))
	waitText("#status", "Created topic created-in-console")
	waitText("#topics", "persistent://public/default/created-in-console")
	var created struct {
		Entries *int64 `json:"entries"`
	}
	apiGet("/admin/v2/persistent/public/default/created-in-console/stats", &created)
	if created.Entries == nil {
		t.Fatal("the created topic has no stats")
	}
	// A partitioned one: its page lists its partitions.
	run("create a partitioned topic", chromedp.SetValue(chromedp.CSS("#new-topic"), "sharded"), chromedp.SetValue(chromedp.CSS("#new-partitions"), "3"),
		chromedp.Click(chromedp.CSS(`button[data-action="create-topic"]`)))
	waitText("#status", "Created topic sharded")
	var meta struct {
		Partitions int `json:"partitions"`
	}
	apiGet("/admin/v2/persistent/public/default/sharded/partitions", &meta)
	if meta.Partitions != 3 {
		t.Fatalf("the partitioned topic has %d partitions, want 3", meta.Partitions)
	}
	goTo("#/topic/public/default/sharded")
	waitText("#partitions", "persistent://public/default/sharded-partition-2")
	goTo("#/ns/public/default")

	// A topic: stats, subscriptions with their consumer, live counters.
	goTo("#/topic/public/default/orders")
	waitText("#stat-entries", "20")
	waitText(`tr[data-subscription="audit"] .backlog`, "20")
	waitText(`tr[data-subscription="audit"] .consumers`, "audit-reader")
	send(5)
	waitText("#stat-msg-in", "25")
	// The rate chart took the 5 messages in: a point with a positive rate in.
	if err := poll(`(() => { const c = document.querySelector("#chart-rate"); return !!c && !!c.dataset.last && parseFloat(c.dataset.last.split(",")[0]) > 0; })()`); err != nil {
		last, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#chart-rate").dataset.last || "(none)"`))
		t.Fatalf("the rate chart never showed messages in: last point %s (%v)", last, err)
	}
	waitText(`tr[data-subscription="audit"] .backlog`, "25")
	screenshot("console-topic.png")

	// Skip 5: the backlog drops, as the API reports.
	run("skip", chromedp.SetValue(chromedp.CSS(`tr[data-subscription="audit"] form:nth-of-type(1) input`), "5"),
		chromedp.Click(chromedp.CSS(`tr[data-subscription="audit"] button[data-action="skip"]`)))
	waitText("#status", "Skipped 5 on audit")
	if b := backlog(); b != 20 {
		t.Fatalf("backlog after skipping 5 of 25: %d", b)
	}
	waitText(`tr[data-subscription="audit"] .backlog`, "20")
	// Reset to an hour ago: everything is unacknowledged again.
	run("reset", chromedp.SetValue(chromedp.CSS(`tr[data-subscription="audit"] form:nth-of-type(2) input`), "60"),
		chromedp.Click(chromedp.CSS(`tr[data-subscription="audit"] button[data-action="reset"]`)))
	waitText("#status", "Reset audit to")
	if b := backlog(); b != 25 {
		t.Fatalf("backlog after a reset to an hour ago: %d, want 25", b)
	}
	// Unload: the owner lets go (its ownership-release counter moves).
	released := func() string {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, "magnetar_broker_ownership_changes_total") && strings.Contains(line, `change="released"`) {
				return line
			}
		}
		return ""
	}
	before := released()
	run("unload", chromedp.Click(chromedp.CSS(`button[data-action="unload"]`)))
	waitText("#status", "Unloaded orders")
	if after := released(); after == before {
		t.Fatalf("after the unload the released ownerships did not move: %q", after)
	}
}
