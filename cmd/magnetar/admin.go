package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/config"
	"github.com/magnetar-io/magnetar/internal/netaddr"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

const defaultAdminURL = "http://127.0.0.1:8080"

// adminClient calls the admin REST API of any of several brokers. Each
// call tries the URLs in turn: one that cannot be reached, does not answer
// within attemptTimeout, or answers 502, 503 or 504 (unavailable), is
// followed by the next; any other answer is final. When every URL failed,
// it waits (backoff) and tries them all again, until timeout.
type adminClient struct {
	urls []string
	// timeout bounds a call, retries included; attemptTimeout bounds one
	// request (redirects included).
	timeout, attemptTimeout time.Duration
	http                    *http.Client
	out                     io.Writer
	// failed, if set, is told of every attempt that failed and is retried
	// (tests).
	failed func(url string, err error)
	// auth, if set, gives the token every request carries.
	auth client.Authentication
}

// Backoff between rounds over every URL: doubling from backoffMin up to
// backoffMax, each wait drawn from [d/2, d).
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = time.Second
)

// setURLs checks and sets the comma-separated --admin-url list.
func (a *adminClient) setURLs(list string) error {
	a.urls = a.urls[:0]
	for _, u := range strings.Split(list, ",") {
		u = strings.TrimSpace(u)
		if err := netaddr.HTTPURL(u); err != nil {
			return fmt.Errorf("--admin-url %q: %w", u, err)
		}
		a.urls = append(a.urls, strings.TrimSuffix(u, "/"))
	}
	return nil
}

// errUnavailable marks an attempt that another URL, or a later round,
// may do better on.
var errUnavailable = errors.New("unavailable")

// call sends a request; a JSON answer is printed indented.
func (a *adminClient) call(ctx context.Context, method, path string, body any) error {
	return a.do(ctx, method, path, body, func(data []byte, _ http.Header) error { return a.print(data) })
}

// do sends a request and hands a successful answer to handle.
func (a *adminClient) do(ctx context.Context, method, path string, body any, handle func([]byte, http.Header) error) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	last := make([]error, len(a.urls))
	for wait := backoffMin; ; wait = min(2*wait, backoffMax) {
		for i, base := range a.urls {
			answer, header, err := a.attempt(callCtx, base, method, path, data)
			if err == nil {
				return handle(answer, header)
			}
			if ctx.Err() != nil {
				return ctx.Err() // interrupted
			}
			if !errors.Is(err, errUnavailable) {
				return err
			}
			last[i] = fmt.Errorf("%s: %w", base, err)
			if a.failed != nil {
				a.failed(base, err)
			}
			if callCtx.Err() != nil {
				break
			}
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2))
		select {
		case <-t.C:
			continue
		case <-callCtx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("admin API: %s %s: no answer within %v (--timeout): %w", method, path, a.timeout, errors.Join(last...))
	}
}

// attempt sends one request to base. A failure to reach it, a timeout and
// a 502, 503 or 504 answer are errUnavailable; other answers of 300 and
// above are errors of their own.
func (a *adminClient) attempt(ctx context.Context, base, method, path string, body []byte) ([]byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, a.attemptTimeout)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body) // also lets a 307 redirect send it again
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, r)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := a.authorize(req); err != nil {
		return nil, nil, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading the answer: %w", errUnavailable, err)
	}
	if resp.StatusCode < 300 {
		return data, resp.Header, nil
	}
	var e struct {
		Reason string `json:"reason"`
	}
	reason := fmt.Errorf("%s %s: %s", method, path, resp.Status)
	if json.Unmarshal(data, &e) == nil && e.Reason != "" {
		reason = errors.New(e.Reason)
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return nil, nil, fmt.Errorf("%w: %s: %w", errUnavailable, resp.Status, reason)
	}
	return nil, nil, &answerError{status: resp.StatusCode, err: reason}
}

// print writes an answer: JSON indented, anything else as it is.
func (a *adminClient) print(data []byte) error {
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

// topicPath turns a topic name into its admin path:
// /admin/v2/persistent/... or /admin/v2/non-persistent/...
func topicPath(s string) (string, error) {
	n, err := topicname.Parse(s)
	if err != nil {
		return "", err
	}
	return "/admin/v2/" + n.Domain.String() + "/" + n.Tenant + "/" + n.Namespace + "/" + url.PathEscape(n.Local), nil
}

// topicDomains are the domains a topic list covers: pulsar-admin's
// --topic-domain (persistent or non_persistent), both when it is "".
func topicDomains(flag string) ([]topicname.Domain, error) {
	switch flag {
	case "":
		return []topicname.Domain{topicname.Persistent, topicname.NonPersistent}, nil
	case "persistent":
		return []topicname.Domain{topicname.Persistent}, nil
	case "non_persistent", "non-persistent":
		return []topicname.Domain{topicname.NonPersistent}, nil
	}
	return nil, fmt.Errorf("--topic-domain %q: want persistent or non_persistent", flag)
}

func nsPath(s string) (string, error) {
	t, ns, ok := strings.Cut(s, "/")
	if !ok || ns == "" || strings.Contains(ns, "/") {
		return "", fmt.Errorf("namespace %q: want tenant/namespace", s)
	}
	return "/admin/v2/namespaces/" + t + "/" + ns, nil
}

func newAdminCmd(g *globals) *cobra.Command {
	a := &adminClient{http: &http.Client{}}
	var urls string
	cmd := &cobra.Command{Use: "admin", Short: "Manage tenants, namespaces, topics and subscriptions (like pulsar-admin)"}
	cmd.PersistentFlags().StringVar(&urls, "admin-url", defaultAdminURL,
		"admin API URL, or several brokers' comma-separated: each call tries them in turn (the next one if a broker is down, does not answer or answers 502/503/504)")
	cmd.PersistentFlags().DurationVar(&a.timeout, "timeout", 30*time.Second,
		"give up a call after this long (until then every URL is tried again, with backoff)")
	cmd.PersistentFlags().DurationVar(&a.attemptTimeout, "attempt-timeout", 15*time.Second,
		"give up on one URL after this long without an answer, and try the next (a broker waits up to 10s for the others when it gathers their stats)")
	var af authFlags
	af.register(cmd.PersistentFlags())
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if err := config.ApplyToFlags(c.Flags(), g.config); err != nil {
			return err
		}
		var err error
		if a.auth, err = af.authentication(); err != nil {
			return err
		}
		if af.tlsTrust != "" || af.tlsCert != "" || af.tlsAllowInsecure {
			tc, err := tlsutil.NewClient(tlsutil.Files{Cert: af.tlsCert, Key: af.tlsKey, Trust: af.tlsTrust}, af.tlsAllowInsecure)
			if err != nil {
				return err
			}
			a.http.Transport = &http.Transport{TLSClientConfig: tc}
		}
		// A redirect goes to another broker of the cluster: it gets the
		// token too (Go drops it for another host).
		a.http.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if req.URL.Scheme != via[0].URL.Scheme {
				return fmt.Errorf("refusing a redirect from %s to %s (another scheme)", via[0].URL.Scheme, req.URL.Scheme)
			}
			return a.authorize(req)
		}
		a.out = c.OutOrStdout()
		if a.timeout <= 0 || a.attemptTimeout <= 0 {
			return fmt.Errorf("--timeout %v and --attempt-timeout %v must be positive", a.timeout, a.attemptTimeout)
		}
		return a.setURLs(urls)
	}
	sub := func(parent *cobra.Command, use, short string, args int, run func(context.Context, []string) error) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(args), RunE: func(c *cobra.Command, as []string) error { return run(c.Context(), as) }}
		parent.AddCommand(c)
		return c
	}

	tenants := &cobra.Command{Use: "tenants", Short: "Tenants"}
	sub(tenants, "list", "List tenants", 0, func(ctx context.Context, _ []string) error { return a.call(ctx, "GET", "/admin/v2/tenants", nil) })
	var adminRoles, allowedClusters []string
	var ct *cobra.Command
	ct = sub(tenants, "create TENANT", "Create a tenant", 1, func(ctx context.Context, as []string) error {
		info := tenantInfo{AdminRoles: nonNil(adminRoles), AllowedClusters: nonNil(allowedClusters)}
		if !ct.Flags().Changed("allowed-clusters") {
			// Every cluster, as pulsar-admin does: the deployment's one.
			if err := a.do(ctx, "GET", "/admin/v2/clusters", nil, func(b []byte, _ http.Header) error { return json.Unmarshal(b, &info.AllowedClusters) }); err != nil {
				return err
			}
		}
		return a.call(ctx, "PUT", "/admin/v2/tenants/"+url.PathEscape(as[0]), info)
	})
	sub(tenants, "get TENANT", "Show a tenant's admin roles and allowed clusters", 1, func(ctx context.Context, as []string) error {
		return a.call(ctx, "GET", "/admin/v2/tenants/"+url.PathEscape(as[0]), nil)
	})
	var ut *cobra.Command
	ut = sub(tenants, "update TENANT", "Replace a tenant's admin roles or allowed clusters (what is not given is kept)", 1, func(ctx context.Context, as []string) error {
		path := "/admin/v2/tenants/" + url.PathEscape(as[0])
		var info tenantInfo
		if !ut.Flags().Changed("admin-roles") || !ut.Flags().Changed("allowed-clusters") {
			// What is not given is kept: read it first.
			if err := a.do(ctx, "GET", path, nil, func(b []byte, _ http.Header) error { return json.Unmarshal(b, &info) }); err != nil {
				return err // "not found: tenant ... does not exist" for a missing one
			}
		}
		if ut.Flags().Changed("admin-roles") {
			info.AdminRoles = nonNil(adminRoles)
		}
		if ut.Flags().Changed("allowed-clusters") {
			info.AllowedClusters = nonNil(allowedClusters)
		}
		return a.call(ctx, "POST", path, info)
	})
	for _, c := range []*cobra.Command{ct, ut} {
		c.Flags().StringSliceVarP(&adminRoles, "admin-roles", "r", nil, "the tenant's admin roles (comma-separated)")
		c.Flags().StringSliceVarP(&allowedClusters, "allowed-clusters", "c", nil, "the clusters the tenant may use (comma-separated; a Magnetar deployment is one cluster; create's default: every cluster)")
	}
	sub(tenants, "delete TENANT", "Delete an empty tenant", 1, func(ctx context.Context, as []string) error {
		return a.call(ctx, "DELETE", "/admin/v2/tenants/"+url.PathEscape(as[0]), nil)
	})

	namespaces := &cobra.Command{Use: "namespaces", Short: "Namespaces and their policies"}
	sub(namespaces, "list TENANT", "List a tenant's namespaces", 1, func(ctx context.Context, as []string) error {
		return a.call(ctx, "GET", "/admin/v2/namespaces/"+as[0], nil)
	})
	var quotaType, nsSub string
	withNS := func(use, short, method, suffix string, body func() (any, error)) *cobra.Command {
		return sub(namespaces, use+" TENANT/NAMESPACE", short, 1, func(ctx context.Context, as []string) error {
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
			suffix := strings.ReplaceAll(suffix, "{type}", url.QueryEscape(quotaType))
			if strings.Contains(suffix, "{sub}") {
				if nsSub == "" && strings.HasPrefix(suffix, "/unsubscribe") {
					return errors.New("a subscription is required: -s NAME")
				}
				if nsSub != "" {
					suffix = strings.ReplaceAll(suffix, "{sub}", "/"+url.PathEscape(nsSub))
				}
				suffix = strings.ReplaceAll(suffix, "{sub}", "")
			}
			return a.call(ctx, method, p+suffix, b)
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

	withNS("policies", "Show a namespace's policies", "GET", "", nil)
	withNS("topics", "List a namespace's topics (every partition)", "GET", "/topics", nil)
	withNS("remove-retention", "Go back to the broker's retention", "DELETE", "/retention", nil)
	withNS("remove-message-ttl", "Go back to the broker's message TTL", "DELETE", "/messageTTL", nil)
	withNS("remove-persistence", "Go back to the broker's ensemble and quorums", "DELETE", "/persistence", nil)
	withNS("get-backlog-quotas", "Show the backlog quotas", "GET", "/backlogQuotaMap", nil)
	var quotaPolicy, quotaSize, quotaTime string
	sbq := withNS("set-backlog-quota", "Limit each subscription's backlog: by size (-t destination_storage, --limit-size) or age (-t message_age, --limit-time)", "POST", "/backlogQuota?backlogQuotaType={type}",
		func() (any, error) {
			body := map[string]any{"policy": quotaPolicy}
			switch quotaType {
			case "destination_storage":
				mb, err := parseMB(quotaSize)
				if err != nil || mb <= 0 {
					return nil, fmt.Errorf("--limit-size %q: want a size such as 500M or 10G", quotaSize)
				}
				body["limitSize"] = mb << 20
			case "message_age":
				d, err := time.ParseDuration(quotaTime)
				if err != nil || d < time.Second {
					return nil, fmt.Errorf("--limit-time %q: want a duration of a second or more, such as 90s or 12h", quotaTime)
				}
				body["limitTime"] = int64(d / time.Second)
			default:
				return nil, fmt.Errorf("-t %q: want destination_storage or message_age", quotaType)
			}
			return body, nil
		})
	sbq.Flags().StringVarP(&quotaType, "type", "t", "destination_storage", "destination_storage or message_age")
	sbq.Flags().StringVarP(&quotaPolicy, "policy", "p", "", "producer_request_hold, producer_exception or consumer_backlog_eviction (required)")
	sbq.Flags().StringVar(&quotaSize, "limit-size", "", "destination_storage: the size (e.g. 500M, 10G)")
	sbq.Flags().StringVar(&quotaTime, "limit-time", "", "message_age: the age (e.g. 90s, 12h)")
	rbq := withNS("remove-backlog-quota", "Remove a backlog quota", "DELETE", "/backlogQuota?backlogQuotaType={type}", nil)
	rbq.Flags().StringVarP(&quotaType, "type", "t", "destination_storage", "destination_storage or message_age")
	ncb := withNS("clear-backlog", "Acknowledge everything published so far on every topic's subscriptions (-s: only that one)", "POST", "/clearBacklog{sub}", nil)
	ncb.Flags().StringVarP(&nsSub, "sub", "s", "", "only this subscription")
	nus := withNS("unsubscribe", "Delete a subscription from every topic of the namespace", "POST", "/unsubscribe{sub}", nil)
	nus.Flags().StringVarP(&nsSub, "sub", "s", "", "the subscription (required)")

	// Grants, on a namespace or a topic: PATH is the resource's admin path.
	var role string
	var actions []string
	grants := func(parent *cobra.Command, arg string, path func(string) (string, error)) {
		sub(parent, "permissions "+arg, "Show the roles granted actions", 1, func(ctx context.Context, as []string) error {
			p, err := path(as[0])
			if err != nil {
				return err
			}
			return a.call(ctx, "GET", p+"/permissions", nil)
		})
		gp := sub(parent, "grant-permission "+arg, "Grant a role actions (produce, consume, ...)", 1, func(ctx context.Context, as []string) error {
			p, err := path(as[0])
			if err != nil {
				return err
			}
			if role == "" || len(actions) == 0 {
				return errors.New("give --role and --actions (e.g. --actions produce,consume)")
			}
			return a.call(ctx, "POST", p+"/permissions/"+url.PathEscape(role), actions)
		})
		gp.Flags().StringVar(&role, "role", "", "the role (required)")
		gp.Flags().StringSliceVar(&actions, "actions", nil, "actions to grant: produce, consume (comma-separated; required)")
		rp := sub(parent, "revoke-permission "+arg, "Revoke a role's grant", 1, func(ctx context.Context, as []string) error {
			p, err := path(as[0])
			if err != nil {
				return err
			}
			if role == "" {
				return errors.New("give --role")
			}
			return a.call(ctx, "DELETE", p+"/permissions/"+url.PathEscape(role), nil)
		})
		rp.Flags().StringVar(&role, "role", "", "the role (required)")
	}
	grants(namespaces, "TENANT/NAMESPACE", nsPath)
	withNS("get-subscription-auth-mode", "Show whether subscription names must be prefixed by the role", "GET", "/subscriptionAuthMode", nil)
	var subAuthMode string
	sam := withNS("set-subscription-auth-mode", "Require subscription names prefixed by the role (Prefix) or not (None)", "POST", "/subscriptionAuthMode",
		func() (any, error) { return subAuthMode, nil })
	sam.Flags().StringVarP(&subAuthMode, "subscription-auth-mode", "m", "None", "None or Prefix")

	topics := &cobra.Command{Use: "topics", Short: "Topics and subscriptions"}
	grants(topics, "TOPIC", topicPath)
	// list and list-partitioned-topics: the topics of each domain asked
	// for, one list.
	var topicDomain string
	listTopics := func(suffix string) func(context.Context, []string) error {
		return func(ctx context.Context, as []string) error {
			p, err := nsPath(as[0])
			if err != nil {
				return err
			}
			ds, err := topicDomains(topicDomain)
			if err != nil {
				return err
			}
			all := []string{}
			for _, d := range ds {
				err := a.do(ctx, "GET", strings.Replace(p, "/namespaces/", "/"+d.String()+"/", 1)+suffix, nil, func(data []byte, _ http.Header) error {
					var names []string
					if err := json.Unmarshal(data, &names); err != nil {
						return fmt.Errorf("topic list: %w", err)
					}
					all = append(all, names...)
					return nil
				})
				if err != nil {
					return err
				}
			}
			out, _ := json.Marshal(all)
			return a.print(out)
		}
	}
	lt := sub(topics, "list TENANT/NAMESPACE", "List topics (a partitioned topic's partitions)", 1, listTopics(""))
	lpt := sub(topics, "list-partitioned-topics TENANT/NAMESPACE", "List partitioned topics", 1, listTopics("/partitioned"))
	for _, c := range []*cobra.Command{lt, lpt} {
		c.Flags().StringVar(&topicDomain, "topic-domain", "", "persistent or non_persistent (default both)")
	}
	// fill puts the flags into a path suffix's placeholders (set below,
	// once the flags exist).
	var fill func(string) (string, error)
	withTopic := func(use, short, method, suffix string, body func() (any, error)) *cobra.Command {
		return sub(topics, use+" TOPIC", short, 1, func(ctx context.Context, as []string) error {
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
			return a.call(ctx, method, p+s, b)
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
	var msgLedger, msgEntry int64
	subFlag := func(c *cobra.Command) {
		c.Flags().StringVarP(&subName, "subscription", "s", "", "subscription name (required)")
	}
	cs := withTopic("create-subscription", "Create a subscription at the end of the topic", "PUT", "/subscription/{sub}", nil)
	subFlag(cs)
	us := withTopic("unsubscribe", "Delete a subscription", "DELETE", "/subscription/{sub}?force={force}", nil)
	subFlag(us)
	us.Flags().BoolVarP(&force, "force", "f", false, "delete even with connected consumers")
	rc := sub(topics, "reset-cursor TOPIC", "Move a subscription to a time (-t) or a message id (-m LEDGER:ENTRY)", 1, func(ctx context.Context, as []string) error {
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
			return a.call(ctx, "POST", fmt.Sprintf("%s/subscription/%s/resetcursor/%d", p, url.PathEscape(subName), time.Now().Add(-d).UnixMilli()), nil)
		case resetID != "" && resetTime == "":
			l, e, ok := strings.Cut(resetID, ":")
			ledger, err1 := strconv.ParseInt(l, 10, 64)
			entry, err2 := strconv.ParseInt(e, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("-m %q: want LEDGER:ENTRY", resetID)
			}
			return a.call(ctx, "POST", fmt.Sprintf("%s/subscription/%s/resetcursor", p, url.PathEscape(subName)), map[string]int64{"ledgerId": ledger, "entryId": entry})
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
	pk := sub(topics, "peek-messages TOPIC", "Show the first N unacknowledged messages of a subscription (a partition's, for a partitioned topic)", 1, func(ctx context.Context, as []string) error {
		p, err := topicPath(as[0])
		if err != nil {
			return err
		}
		if subName == "" {
			return errors.New("a subscription is required: -s NAME")
		}
		if n < 1 {
			return fmt.Errorf("-n %d: want 1 or more", n)
		}
		return a.peekMessages(ctx, p, subName, n)
	})
	subFlag(pk)
	pk.Flags().IntVarP(&n, "count", "n", 1, "number of messages")
	gm := withTopic("get-message-by-id", "Show the message at a ledger and entry", "GET", "/ledger/{ledger}/entry/{entry}", nil)
	gm.RunE = func(c *cobra.Command, as []string) error {
		p, err := topicPath(as[0])
		if err != nil {
			return err
		}
		return a.do(c.Context(), "GET", fmt.Sprintf("%s/ledger/%d/entry/%d", p, msgLedger, msgEntry), nil, func(data []byte, h http.Header) error {
			msgs, err := splitPeeked(data, h)
			for _, m := range msgs {
				a.printPeeked(m)
			}
			return err
		})
	}
	gm.Flags().Int64VarP(&msgLedger, "ledger-id", "l", 0, "ledger id")
	gm.Flags().Int64VarP(&msgEntry, "entry-id", "e", 0, "entry id")
	cb := withTopic("clear-backlog", "Acknowledge everything published so far on a subscription (every partition of a partitioned topic)", "POST", "/subscription/{sub}/skip_all", nil)
	subFlag(cb)
	var expireSecs int64
	em := withTopic("expire-messages", "Acknowledge a subscription's messages published more than -t seconds ago", "POST", "/subscription/{sub}/expireMessages/{expire}", nil)
	subFlag(em)
	em.Flags().Int64VarP(&expireSecs, "expireTime", "t", 0, "seconds (required)")
	em.MarkFlagRequired("expireTime")
	ema := withTopic("expire-messages-all-subscriptions", "The same on every subscription", "POST", "/all_subscription/expireMessages/{expire}", nil)
	ema.Flags().Int64VarP(&expireSecs, "expireTime", "t", 0, "seconds (required)")
	ema.MarkFlagRequired("expireTime")
	withTopic("partitioned-stats", "Show a partitioned topic's statistics: the sums and each partition's", "GET", "/partitioned-stats", nil)
	up := withTopic("update-partitioned-topic", "Raise a partitioned topic's partition count", "POST", "/partitions", func() (any, error) { return parts, nil })
	up.Flags().IntVarP(&parts, "partitions", "p", 0, "the new number of partitions")
	withTopic("last-message-id", "Show the id of the last message", "GET", "/lastMessageId", nil)
	withTopic("terminate", "Terminate a topic (partition): it takes no more messages nor producers, ever; shows the id of its last message", "POST", "/terminate", nil)
	withTopic("partitioned-terminate", "Terminate every partition of a partitioned topic; shows the id of each one's last message", "POST", "/terminate/partitions", nil)
	withTopic("info-internal", "Show the stored ledger list and cursors", "GET", "/internal-info", nil)
	sub(topics, "lookup TOPIC", "Show the broker that serves a topic (partition)", 1, func(ctx context.Context, as []string) error {
		p, err := topicPath(as[0])
		if err != nil {
			return err
		}
		return a.call(ctx, "GET", strings.Replace(p, "/admin/v2/", "/lookup/v2/topic/", 1), nil)
	})
	fill = func(s string) (string, error) {
		if strings.Contains(s, "{sub}") {
			if subName == "" {
				return "", errors.New("a subscription is required: -s NAME")
			}
			s = strings.ReplaceAll(s, "{sub}", url.PathEscape(subName))
		}
		s = strings.ReplaceAll(s, "{n}", strconv.Itoa(n))
		s = strings.ReplaceAll(s, "{expire}", strconv.FormatInt(expireSecs, 10))
		return strings.ReplaceAll(s, "{force}", strconv.FormatBool(force)), nil
	}

	brokers := &cobra.Command{Use: "brokers", Short: "Brokers"}
	sub(brokers, "list", "List live brokers", 0, func(ctx context.Context, _ []string) error { return a.call(ctx, "GET", "/admin/v2/brokers", nil) })
	sub(brokers, "owners", "Show which broker owns each loaded topic partition", 0, func(ctx context.Context, _ []string) error { return a.call(ctx, "GET", "/admin/v2/owners", nil) })
	sub(brokers, "load", "Show each live broker's partitions, message rates and CPU", 0, func(ctx context.Context, _ []string) error { return a.call(ctx, "GET", "/admin/v2/brokers/load", nil) })
	sub(brokers, "healthcheck", "Check that the broker answering is ready (prints ok)", 0, func(ctx context.Context, _ []string) error {
		return a.call(ctx, "GET", "/admin/v2/brokers/health", nil)
	})
	sub(brokers, "get-runtime-config", "Show the settings of the broker answering (secrets left out)", 0, func(ctx context.Context, _ []string) error {
		return a.call(ctx, "GET", "/admin/v2/brokers/configuration/runtime", nil)
	})
	sub(brokers, "get-internal-config", "Show the metadata store the brokers use", 0, func(ctx context.Context, _ []string) error {
		return a.call(ctx, "GET", "/admin/v2/brokers/internal-configuration", nil)
	})
	sub(brokers, "list-dynamic-config", "List the settings that can change at run time (none: settings are flags, read at start)", 0, func(ctx context.Context, _ []string) error {
		return a.call(ctx, "GET", "/admin/v2/brokers/configuration", nil)
	})
	var brokerURL string
	bn := sub(brokers, "namespaces CLUSTER", "List the namespaces a broker (--url HOST:PORT, as brokers list names it) owns topics of", 1, func(ctx context.Context, as []string) error {
		if brokerURL == "" {
			return errors.New("a broker is required: --url HOST:PORT (see brokers list)")
		}
		return a.call(ctx, "GET", "/admin/v2/brokers/"+url.PathEscape(as[0])+"/"+url.PathEscape(brokerURL)+"/ownedNamespaces", nil)
	})
	bn.Flags().StringVar(&brokerURL, "url", "", "the broker, HOST:PORT as brokers list shows it")

	// Clusters: a deployment is one cluster (--cluster-name).
	clusters := &cobra.Command{Use: "clusters", Short: "Clusters (a Magnetar deployment is one)"}
	sub(clusters, "list", "List clusters", 0, func(ctx context.Context, _ []string) error { return a.call(ctx, "GET", "/admin/v2/clusters", nil) })
	sub(clusters, "get CLUSTER", "Show a cluster's service URLs", 1, func(ctx context.Context, as []string) error {
		return a.call(ctx, "GET", "/admin/v2/clusters/"+url.PathEscape(as[0]), nil)
	})
	sub(clusters, "get-peer-clusters CLUSTER", "List a cluster's peers (none)", 1, func(ctx context.Context, as []string) error {
		return a.call(ctx, "GET", "/admin/v2/clusters/"+url.PathEscape(as[0])+"/peers", nil)
	})
	sub(clusters, "list-failure-domains CLUSTER", "List a cluster's failure domains (none: bookies are placed by --rack)", 1, func(ctx context.Context, as []string) error {
		return a.call(ctx, "GET", "/admin/v2/clusters/"+url.PathEscape(as[0])+"/failureDomains", nil)
	})

	// Schemas, by topic.
	schemas := &cobra.Command{Use: "schemas", Short: "Topics' schemas"}
	// A topic's schemas, shared by its persistent and non-persistent
	// forms (as in Pulsar).
	schemaPath := func(topic string) (string, error) {
		n, err := topicname.Parse(topic)
		if err != nil {
			return "", err
		}
		return "/admin/v2/schemas/" + n.Tenant + "/" + n.Namespace + "/" + url.PathEscape(n.Local), nil
	}
	var schemaVersion int64
	sg := sub(schemas, "get TOPIC", "Show a topic's latest schema, or --version N", 1, func(ctx context.Context, as []string) error {
		p, err := schemaPath(as[0])
		if err != nil {
			return err
		}
		if schemaVersion < -1 {
			return fmt.Errorf("--version %d: want a version, 0 or more", schemaVersion)
		}
		if schemaVersion >= 0 {
			return a.call(ctx, "GET", p+"/schema/"+strconv.FormatInt(schemaVersion, 10), nil)
		}
		return a.call(ctx, "GET", p+"/schema", nil)
	})
	sg.Flags().Int64Var(&schemaVersion, "version", -1, "the version to show (default: the latest)")
	var schemaFile string
	su := sub(schemas, "upload TOPIC", "Add a schema version from a file holding Pulsar's payload: {\"type\": \"AVRO\", \"schema\": \"...\", \"properties\": {}}", 1, func(ctx context.Context, as []string) error {
		p, err := schemaPath(as[0])
		if err != nil {
			return err
		}
		if schemaFile == "" {
			return errors.New("a schema file is required: -f FILE")
		}
		data, err := readCapped(schemaFile, 1<<20)
		if err != nil {
			return err
		}
		var payload map[string]any
		if err := json.Unmarshal(data, &payload); err != nil {
			return fmt.Errorf("%s: want Pulsar's schema payload (JSON): %w", schemaFile, err)
		}
		return a.call(ctx, "POST", p+"/schema", payload)
	})
	su.Flags().StringVarP(&schemaFile, "filename", "f", "", "file holding the schema payload (JSON)")
	sub(schemas, "delete TOPIC", "Delete every schema version of a topic", 1, func(ctx context.Context, as []string) error {
		p, err := schemaPath(as[0])
		if err != nil {
			return err
		}
		return a.call(ctx, "DELETE", p+"/schema", nil)
	})
	bookies := &cobra.Command{Use: "bookies", Short: "Bookies"}
	sub(bookies, "list", "List every bookie: state (writable, read-only, draining, decommissioned, down, lost), disk, ledgers, under-replicated ledgers", 0, func(ctx context.Context, _ []string) error {
		return a.call(ctx, "GET", "/admin/v2/bookies/all", nil)
	})
	sub(bookies, "get ID", "Show one bookie (decommission progress: its ledgers count down to 0)", 1, func(ctx context.Context, args []string) error {
		return a.call(ctx, "GET", "/admin/v2/bookies/"+url.PathEscape(args[0]), nil)
	})
	sub(bookies, "under-replicated", "List the ledgers whose copies on a bookie are to be repaired or moved", 0, func(ctx context.Context, _ []string) error {
		return a.call(ctx, "GET", "/admin/v2/bookies/under-replicated", nil)
	})
	sub(bookies, "decommission ID", "Drain a bookie: it turns read-only, its copies move to other bookies, then it may be removed", 1, func(ctx context.Context, args []string) error {
		return a.call(ctx, "POST", "/admin/v2/bookies/"+url.PathEscape(args[0])+"/decommission", nil)
	})
	var spread float64
	rb := sub(bookies, "rebalance", "Move closed ledgers' copies from the fullest bookies to the emptiest until their usage is within --target-spread of the mean", 0, func(ctx context.Context, _ []string) error {
		return a.call(ctx, "POST", "/admin/v2/bookies/rebalance", map[string]float64{"targetSpread": spread})
	})
	rb.Flags().Float64Var(&spread, "target-spread", 0, "(max - min) / mean usage to reach (default: the autorecovery's, 0.2)")
	sub(bookies, "rebalance-status", "Show the rebalance in progress", 0, func(ctx context.Context, _ []string) error {
		return a.call(ctx, "GET", "/admin/v2/bookies/rebalance", nil)
	})
	sub(bookies, "recommission ID", "Stop a drain: the bookie turns writable again", 1, func(ctx context.Context, args []string) error {
		return a.call(ctx, "POST", "/admin/v2/bookies/"+url.PathEscape(args[0])+"/recommission", nil)
	})

	cmd.AddCommand(clusters, tenants, namespaces, topics, schemas, brokers, bookies)
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

// authorize sets the request's Authorization header from the token.
func (a *adminClient) authorize(req *http.Request) error {
	if a.auth == nil {
		return nil
	}
	tok, err := a.auth.Token()
	if err != nil {
		return fmt.Errorf("auth token: %w", err)
	}
	if tok != "" { // "" with a client certificate
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return nil
}

// tenantInfo is a tenant as the admin API takes and shows it.
type tenantInfo struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

func nonNil(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// answerError is an answer of 300 and above (other than 502, 503, 504).
type answerError struct {
	status int
	err    error
}

func (e *answerError) Error() string { return e.err.Error() }
func (e *answerError) Unwrap() error { return e.err }

// peekMessages prints the first n unacknowledged messages of a
// subscription, as pulsar-admin's peek-messages does: the admin API
// answers entry by entry, and a batch's messages are shown one by one.
// Fewer than n messages are shown when there are fewer.
func (a *adminClient) peekMessages(ctx context.Context, topicP, sub string, n int) error {
	shown := 0
	for pos := 1; shown < n; pos++ {
		err := a.do(ctx, "GET", fmt.Sprintf("%s/subscription/%s/position/%d", topicP, url.PathEscape(sub), pos), nil, func(data []byte, h http.Header) error {
			msgs, err := splitPeeked(data, h)
			for _, m := range msgs {
				if shown == n {
					break
				}
				a.printPeeked(m)
				shown++
			}
			return err
		})
		var ae *answerError
		if errors.As(err, &ae) && ae.status == http.StatusNotFound && shown > 0 {
			return nil // no more
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// peeked is one message of a peeked entry.
type peeked struct {
	id, published, producer, key string
	props                        map[string]string
	payload                      []byte
}

// splitPeeked reads the admin API's answer for an entry (its payload and
// X-Pulsar-* headers) into its messages.
func splitPeeked(data []byte, h http.Header) ([]peeked, error) {
	base := peeked{id: h.Get("X-Pulsar-Message-ID"), published: h.Get("X-Pulsar-Publish-Time"), producer: h.Get("X-Pulsar-Producer-Name"),
		key: h.Get("X-Pulsar-Partition-Key"), payload: data}
	if p := h.Get("X-Pulsar-Property"); p != "" {
		if err := json.Unmarshal([]byte(p), &base.props); err != nil {
			return nil, fmt.Errorf("X-Pulsar-PROPERTY %q: %w", p, err)
		}
	}
	nb := h.Get("X-Pulsar-Num-Batch-Message")
	if nb == "" {
		return []peeked{base}, nil
	}
	count, err := strconv.Atoi(nb)
	if err != nil {
		return nil, fmt.Errorf("X-Pulsar-num-batch-message %q: %w", nb, err)
	}
	singles, err := entry.SplitBatch(data, count)
	if err != nil {
		return nil, err
	}
	out := make([]peeked, 0, len(singles))
	for i, sm := range singles {
		m := base
		m.id = fmt.Sprintf("%s:%d", base.id, i)
		m.key, m.payload, m.props = sm.Meta.GetPartitionKey(), sm.Payload, nil
		for _, kv := range sm.Meta.GetProperties() {
			if m.props == nil {
				m.props = map[string]string{}
			}
			m.props[kv.GetKey()] = kv.GetValue()
		}
		out = append(out, m)
	}
	return out, nil
}

// printPeeked prints a message as pulsar-admin does: its id, metadata
// and a hex dump of its payload.
func (a *adminClient) printPeeked(m peeked) {
	fmt.Fprintf(a.out, "Message ID: %s\n", m.id)
	if m.published != "" {
		fmt.Fprintf(a.out, "Publish time: %s\n", m.published)
	}
	if m.producer != "" {
		fmt.Fprintf(a.out, "Producer: %s\n", m.producer)
	}
	if m.key != "" {
		fmt.Fprintf(a.out, "Key: %s\n", m.key)
	}
	if len(m.props) > 0 {
		b, _ := json.Marshal(m.props)
		fmt.Fprintf(a.out, "Properties: %s\n", b)
	}
	fmt.Fprint(a.out, hex.Dump(m.payload))
	fmt.Fprintln(a.out)
}

// readCapped reads a file of at most max bytes.
func readCapped(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, max)
	}
	return data, nil
}
