package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/proto/topicname"
)

const defaultAdminURL = "http://127.0.0.1:8080"

// adminClient calls the admin REST API.
type adminClient struct {
	base string
	http *http.Client
	out  io.Writer
}

// call sends a request; a JSON answer is printed indented.
func (a *adminClient) call(method, path string, body any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(a.base, "/")+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", a.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(data, &e) == nil && e.Reason != "" {
			return errors.New(e.Reason)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		_, err = a.out.Write(data)
		return err
	}
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// topicPath turns a topic name into its admin path.
func topicPath(s string) (string, error) {
	n, err := topicname.Parse(s)
	if err != nil {
		return "", err
	}
	return "/admin/v2/persistent/" + n.Tenant + "/" + n.Namespace + "/" + url.PathEscape(n.Local), nil
}

func nsPath(s string) (string, error) {
	t, ns, ok := strings.Cut(s, "/")
	if !ok || ns == "" || strings.Contains(ns, "/") {
		return "", fmt.Errorf("namespace %q: want tenant/namespace", s)
	}
	return "/admin/v2/namespaces/" + t + "/" + ns, nil
}

func newAdminCmd(g *globals) *cobra.Command {
	a := &adminClient{http: &http.Client{Timeout: time.Minute}}
	cmd := &cobra.Command{Use: "admin", Short: "Manage tenants, namespaces, topics and subscriptions (like pulsar-admin)"}
	cmd.PersistentFlags().StringVar(&a.base, "admin-url", defaultAdminURL, "admin API URL")
	cmd.PersistentPreRun = func(c *cobra.Command, _ []string) { a.out = c.OutOrStdout() }
	sub := func(parent *cobra.Command, use, short string, args int, run func([]string) error) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(args), RunE: func(_ *cobra.Command, as []string) error { return run(as) }}
		parent.AddCommand(c)
		return c
	}

	tenants := &cobra.Command{Use: "tenants", Short: "Tenants"}
	sub(tenants, "list", "List tenants", 0, func([]string) error { return a.call("GET", "/admin/v2/tenants", nil) })
	sub(tenants, "create TENANT", "Create a tenant", 1, func(as []string) error { return a.call("PUT", "/admin/v2/tenants/"+as[0], map[string]any{}) })
	sub(tenants, "delete TENANT", "Delete an empty tenant", 1, func(as []string) error { return a.call("DELETE", "/admin/v2/tenants/"+as[0], nil) })

	namespaces := &cobra.Command{Use: "namespaces", Short: "Namespaces and their policies"}
	sub(namespaces, "list TENANT", "List a tenant's namespaces", 1, func(as []string) error { return a.call("GET", "/admin/v2/namespaces/"+as[0], nil) })
	withNS := func(use, short, method, suffix string, body func() (any, error)) *cobra.Command {
		return sub(namespaces, use+" TENANT/NAMESPACE", short, 1, func(as []string) error {
			p, err := nsPath(as[0])
			if err != nil {
				return err
			}
			var b any
			if body != nil {
				if b, err = body(); err != nil {
					return err
				}
			}
			return a.call(method, p+suffix, b)
		})
	}
	withNS("create", "Create a namespace", "PUT", "", nil)
	withNS("delete", "Delete an empty namespace", "DELETE", "", nil)
	withNS("unload", "Unload every owned partition of a namespace (on every broker)", "PUT", "/unload", nil)
	withNS("get-retention", "Show the retention of consumed messages", "GET", "/retention", nil)
	var retTime, retSize string
	setRet := withNS("set-retention", "Set the retention of consumed messages", "POST", "/retention", func() (any, error) {
		mins, err := parseMinutes(retTime)
		if err != nil {
			return nil, err
		}
		mb, err := parseMB(retSize)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"retentionTimeInMinutes": mins, "retentionSizeInMB": mb}, nil
	})
	setRet.Flags().StringVar(&retTime, "time", "0", "how long to keep consumed messages (e.g. 30m, 2h, 7d; -1: forever)")
	setRet.Flags().StringVar(&retSize, "size", "0", "how much to keep (e.g. 500M, 10G; -1: no limit)")
	withNS("get-message-ttl", "Show the message TTL in seconds", "GET", "/messageTTL", nil)
	var ttl int
	setTTL := withNS("set-message-ttl", "Set the message TTL", "POST", "/messageTTL", func() (any, error) { return ttl, nil })
	setTTL.Flags().IntVar(&ttl, "ttl", 0, "seconds (0: none)")
	withNS("get-persistence", "Show the replication of new ledgers", "GET", "/persistence", nil)
	var ens, wq, aq int
	setPers := withNS("set-persistence", "Set the replication of new ledgers", "POST", "/persistence", func() (any, error) {
		return map[string]int{"bookkeeperEnsemble": ens, "bookkeeperWriteQuorum": wq, "bookkeeperAckQuorum": aq}, nil
	})
	setPers.Flags().IntVarP(&ens, "bookkeeper-ensemble", "e", 1, "ensemble size")
	setPers.Flags().IntVarP(&wq, "bookkeeper-write-quorum", "w", 1, "write quorum")
	setPers.Flags().IntVarP(&aq, "bookkeeper-ack-quorum", "a", 1, "ack quorum")
	withNS("get-deduplication", "Show whether deduplication is on", "GET", "/deduplication", nil)
	var enable bool
	setDedup := withNS("set-deduplication", "Turn deduplication on or off", "POST", "/deduplication", func() (any, error) { return enable, nil })
	setDedup.Flags().BoolVar(&enable, "enable", false, "true to enable, false to disable")

	topics := &cobra.Command{Use: "topics", Short: "Topics and subscriptions"}
	sub(topics, "list TENANT/NAMESPACE", "List topics", 1, func(as []string) error {
		p, err := nsPath(as[0])
		if err != nil {
			return err
		}
		return a.call("GET", strings.Replace(p, "/namespaces/", "/persistent/", 1), nil)
	})
	// fill puts the flags into a path suffix's placeholders (set below,
	// once the flags exist).
	var fill func(string) (string, error)
	withTopic := func(use, short, method, suffix string, body func() (any, error)) *cobra.Command {
		return sub(topics, use+" TOPIC", short, 1, func(as []string) error {
			p, err := topicPath(as[0])
			if err != nil {
				return err
			}
			var b any
			if body != nil {
				if b, err = body(); err != nil {
					return err
				}
			}
			s, err := fill(suffix)
			if err != nil {
				return err
			}
			return a.call(method, p+s, b)
		})
	}
	withTopic("create", "Create a non-partitioned topic", "PUT", "", nil)
	var parts int
	cp := withTopic("create-partitioned-topic", "Create a partitioned topic", "PUT", "/partitions", func() (any, error) { return parts, nil })
	cp.Flags().IntVarP(&parts, "partitions", "p", 0, "number of partitions")
	withTopic("get-partitioned-topic-metadata", "Show the partition count", "GET", "/partitions", nil)
	var force bool
	del := withTopic("delete", "Delete a topic (every partition of a partitioned one)", "DELETE", "?force={force}", nil)
	del.Flags().BoolVarP(&force, "force", "f", false, "delete even with connected producers or consumers")
	withTopic("stats", "Show topic statistics", "GET", "/stats", nil)
	withTopic("internal-stats", "Show ledgers and cursors", "GET", "/internalStats", nil)
	withTopic("subscriptions", "List subscriptions", "GET", "/subscriptions", nil)
	var subName, resetTime, resetID string
	var n int
	subFlag := func(c *cobra.Command) {
		c.Flags().StringVarP(&subName, "subscription", "s", "", "subscription name (required)")
	}
	cs := withTopic("create-subscription", "Create a subscription at the end of the topic", "PUT", "/subscription/{sub}", nil)
	subFlag(cs)
	us := withTopic("unsubscribe", "Delete a subscription", "DELETE", "/subscription/{sub}?force={force}", nil)
	subFlag(us)
	us.Flags().BoolVarP(&force, "force", "f", false, "delete even with connected consumers")
	rc := sub(topics, "reset-cursor TOPIC", "Move a subscription to a time (-t) or a message id (-m LEDGER:ENTRY)", 1, func(as []string) error {
		p, err := topicPath(as[0])
		if err != nil {
			return err
		}
		if subName == "" {
			return errors.New("a subscription is required: -s NAME")
		}
		switch {
		case resetTime != "" && resetID == "":
			d, err := time.ParseDuration(resetTime)
			if err != nil {
				return fmt.Errorf("-t %q: a duration back from now (e.g. 10m): %v", resetTime, err)
			}
			return a.call("POST", fmt.Sprintf("%s/subscription/%s/resetcursor/%d", p, url.PathEscape(subName), time.Now().Add(-d).UnixMilli()), nil)
		case resetID != "" && resetTime == "":
			l, e, ok := strings.Cut(resetID, ":")
			ledger, err1 := strconv.ParseInt(l, 10, 64)
			entry, err2 := strconv.ParseInt(e, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("-m %q: want LEDGER:ENTRY", resetID)
			}
			return a.call("POST", fmt.Sprintf("%s/subscription/%s/resetcursor", p, url.PathEscape(subName)), map[string]int64{"ledgerId": ledger, "entryId": entry})
		}
		return errors.New("give one of -t DURATION or -m LEDGER:ENTRY")
	})
	subFlag(rc)
	rc.Flags().StringVarP(&resetTime, "time", "t", "", "move to this long ago (e.g. 10m)")
	rc.Flags().StringVarP(&resetID, "messageId", "m", "", "move to this message id (LEDGER:ENTRY)")
	sk := withTopic("skip", "Acknowledge the next N messages of a subscription", "POST", "/subscription/{sub}/skip/{n}", nil)
	subFlag(sk)
	sk.Flags().IntVarP(&n, "count", "n", 1, "number of messages")
	withTopic("unload", "Unload a topic (partition): its owner closes it cleanly; the next lookup assigns it again", "PUT", "/unload", nil)
	pk := withTopic("peek-messages", "Show the N-th unacknowledged message of a subscription", "GET", "/subscription/{sub}/position/{n}", nil)
	subFlag(pk)
	pk.Flags().IntVarP(&n, "count", "n", 1, "which message (1: the first unacknowledged)")
	fill = func(s string) (string, error) {
		if strings.Contains(s, "{sub}") {
			if subName == "" {
				return "", errors.New("a subscription is required: -s NAME")
			}
			s = strings.ReplaceAll(s, "{sub}", url.PathEscape(subName))
		}
		s = strings.ReplaceAll(s, "{n}", strconv.Itoa(n))
		return strings.ReplaceAll(s, "{force}", strconv.FormatBool(force)), nil
	}

	brokers := &cobra.Command{Use: "brokers", Short: "Brokers"}
	sub(brokers, "list", "List live brokers", 0, func([]string) error { return a.call("GET", "/admin/v2/brokers", nil) })
	sub(brokers, "owners", "Show which broker owns each loaded topic partition", 0, func([]string) error { return a.call("GET", "/admin/v2/owners", nil) })
	sub(brokers, "load", "Show each live broker's partitions, message rates and CPU", 0, func([]string) error { return a.call("GET", "/admin/v2/brokers/load", nil) })
	bookies := &cobra.Command{Use: "bookies", Short: "Bookies"}
	sub(bookies, "list", "List live bookies", 0, func([]string) error { return a.call("GET", "/admin/v2/bookies/all", nil) })

	cmd.AddCommand(tenants, namespaces, topics, brokers, bookies)
	return cmd
}

// parseMinutes reads 30m, 2h, 7d or -1.
func parseMinutes(s string) (int64, error) {
	if s == "-1" {
		return -1, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("--time %q: want e.g. 30m, 2h, 7d or -1", s)
		}
		return n * 24 * 60, nil
	}
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--time %q: want e.g. 30m, 2h, 7d or -1", s)
	}
	return int64(d / time.Minute), nil
}

// parseMB reads 500M, 10G, 1T or -1.
func parseMB(s string) (int64, error) {
	if s == "-1" {
		return -1, nil
	}
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1024, strings.TrimSuffix(s, "G")
	case strings.HasSuffix(s, "T"):
		mult, s = 1024*1024, strings.TrimSuffix(s, "T")
	case strings.HasSuffix(s, "M"):
		s = strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--size %q: want e.g. 500M, 10G or -1", s)
	}
	return n * mult, nil
}
