package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/client"
)

// The namespaces, topics and subscriptions calls of pulsaradmin v0.19.0,
// every one of its interfaces' methods, against `magnetar standalone`:
// what Magnetar has works with Pulsar's shapes, what it does not have is
// refused with Pulsar's status (501 for a namespace policy, 405 for any
// topic-level policy, as Pulsar with topic-level policies off).
func TestPulsarAdminNamespacesTopicsSubscriptions(t *testing.T) {
	ports := freePorts(t, 4)
	s := startStandalone(t, t.TempDir(), ports, "--cluster-name", "standalone")
	t.Cleanup(func() { s.stop() })
	admin, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: "http://" + s.httpAddr})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.brokerAddr, OperationTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const cluster = "standalone"
	nss, topics, subs := admin.Namespaces(), admin.Topics(), admin.Subscriptions()
	name := "public/ns1"
	ns, err := utils.GetNamespaceName(name)
	if err != nil {
		t.Fatal(err)
	}
	topicName := func(s string) utils.TopicName {
		tn, err := utils.GetTopicName(s)
		if err != nil {
			t.Fatal(err)
		}
		return *tn
	}
	plain := topicName("persistent://public/ns1/plain")
	parted := topicName("persistent://public/ns1/parted")
	part0 := topicName("persistent://public/ns1/parted-partition-0")
	equal := func(want any) func(any) string {
		return func(got any) string {
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Sprintf("want %v", want)
			}
			return ""
		}
	}
	ok := func(cond bool, msg string) string {
		if cond {
			return ""
		}
		return msg
	}
	produce, _ := utils.ParseAuthAction("produce")
	consume, _ := utils.ParseAuthAction("consume")
	// send publishes unbatched messages with a key and a property.
	send := func(topic string, n int) {
		t.Helper()
		p, err := c.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := 0; i < n; i++ {
			if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i)), Key: "k", Properties: map[string]string{"n": fmt.Sprint(i)}}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Namespaces: creation, listing, the policies Magnetar has.
	runAdminCalls(t, []adminCall{
		{name: "namespaces create", call: func() (any, error) { return nil, nss.CreateNamespace(name) }},
		{name: "namespaces create, existing", call: func() (any, error) { return nil, nss.CreateNamespace(name) }, want: 409},
		{name: "namespaces create with bundles", call: func() (any, error) { return nil, nss.CreateNsWithNumBundles("public/ns2", 4) }},
		{name: "namespaces create with bundles data", call: func() (any, error) {
			return nil, nss.CreateNsWithBundlesData("public/ns3", utils.NewBundlesDataWithNumBundles(1))
		}},
		{name: "namespaces create with policies", call: func() (any, error) {
			ttl, ret := 120, utils.NewRetentionPolicies(60, 100)
			return nil, nss.CreateNsWithPolices("public/ns4", utils.Policies{MessageTTLInSeconds: &ttl,
				RetentionPolicies: &ret, ReplicationClusters: []string{cluster}})
		}},
		{name: "namespaces policies of the namespace created with them", call: func() (any, error) { return nss.GetPolicies("public/ns4") }, check: func(v any) string {
			p := v.(*utils.Policies)
			return ok(p.MessageTTLInSeconds != nil && *p.MessageTTLInSeconds == 120 && p.RetentionPolicies != nil &&
				p.RetentionPolicies.RetentionTimeInMinutes == 60 && p.RetentionPolicies.RetentionSizeInMB == 100, "want the TTL and retention given")
		}},
		{name: "namespaces create with a policy Magnetar does not have", call: func() (any, error) {
			max := 3
			return nil, nss.CreateNsWithPolices("public/ns5", utils.Policies{MaxProducersPerTopic: &max})
		}, want: 501},
		{name: "namespaces list", call: func() (any, error) { return nss.GetNamespaces("public") }, check: func(v any) string {
			l := v.([]string)
			return ok(slices.Contains(l, "public/ns1") && slices.Contains(l, "public/ns4") && !slices.Contains(l, "public/ns5"), "want ns1..ns4, not ns5")
		}},
		{name: "namespaces list, unknown tenant", call: func() (any, error) { return nss.GetNamespaces("nobody") }, want: 404},
		{name: "namespaces delete", call: func() (any, error) { return nil, nss.DeleteNamespace("public/ns3") }},
		{name: "namespaces delete, gone", call: func() (any, error) { return nil, nss.DeleteNamespace("public/ns3") }, want: 404},

		{name: "namespaces set TTL", call: func() (any, error) { return nil, nss.SetNamespaceMessageTTL(name, 3600) }},
		{name: "namespaces get TTL", call: func() (any, error) { return nss.GetNamespaceMessageTTL(name) }, check: equal(3600)},
		{name: "namespaces remove TTL", call: func() (any, error) { return nil, nss.RemoveNamespaceMessageTTL(name) }},
		{name: "namespaces get TTL, removed", call: func() (any, error) { return nss.GetNamespaceMessageTTL(name) }, check: equal(0)},
		{name: "namespaces set retention", call: func() (any, error) { return nil, nss.SetRetention(name, utils.NewRetentionPolicies(600, 1024)) }},
		{name: "namespaces get retention", call: func() (any, error) { return nss.GetRetention(name) }, check: func(v any) string {
			r := v.(*utils.RetentionPolicies)
			return ok(r.RetentionTimeInMinutes == 600 && r.RetentionSizeInMB == 1024, "want 600 minutes, 1024 MB")
		}},
		{name: "namespaces set backlog quota", call: func() (any, error) {
			return nil, nss.SetBacklogQuota(name, utils.NewBacklogQuota(512<<20, -1, utils.ProducerException), utils.DestinationStorage)
		}},
		{name: "namespaces set backlog quota over the retention", call: func() (any, error) {
			return nil, nss.SetBacklogQuota(name, utils.NewBacklogQuota(2<<30, -1, utils.ProducerException), utils.DestinationStorage)
		}, want: 412},
		{name: "namespaces set message-age backlog quota", call: func() (any, error) {
			return nil, nss.SetBacklogQuota(name, utils.NewBacklogQuota(-1, 3600, utils.ConsumerBacklogEviction), utils.MessageAge)
		}},
		{name: "namespaces get backlog quotas", call: func() (any, error) { return nss.GetBacklogQuotaMap(name) }, check: func(v any) string {
			m := v.(map[utils.BacklogQuotaType]utils.BacklogQuota)
			st, age := m[utils.DestinationStorage], m[utils.MessageAge]
			return ok(len(m) == 2 && st.LimitSize == 512<<20 && st.Policy == utils.ProducerException && age.LimitTime == 3600 && age.Policy == utils.ConsumerBacklogEviction,
				"want both quotas as set")
		}},
		{name: "namespaces remove backlog quota", call: func() (any, error) { return nil, nss.RemoveBacklogQuota(name) }},
		{name: "namespaces get backlog quotas, storage removed", call: func() (any, error) { return nss.GetBacklogQuotaMap(name) }, check: func(v any) string {
			m := v.(map[utils.BacklogQuotaType]utils.BacklogQuota)
			_, st := m[utils.DestinationStorage]
			return ok(len(m) == 1 && !st, "want only the message-age quota")
		}},
		{name: "namespaces remove retention", call: func() (any, error) { return nil, nss.RemoveRetention(name) }},
		{name: "namespaces set deduplication", call: func() (any, error) { return nil, nss.SetDeduplicationStatus(name, true) }},
		{name: "namespaces set persistence", call: func() (any, error) { return nil, nss.SetPersistence(name, utils.NewPersistencePolicies(1, 1, 1, 0)) }},
		{name: "namespaces set persistence, impossible", call: func() (any, error) { return nil, nss.SetPersistence(name, utils.NewPersistencePolicies(1, 2, 1, 0)) }, want: 400},
		{name: "namespaces get persistence", call: func() (any, error) { return nss.GetPersistence(name) }, check: func(v any) string {
			p := v.(*utils.PersistencePolicies)
			return ok(p.BookkeeperEnsemble == 1 && p.BookkeeperWriteQuorum == 1 && p.BookkeeperAckQuorum == 1, "want 1/1/1")
		}},
		{name: "namespaces policies", call: func() (any, error) { return nss.GetPolicies(name) }, check: func(v any) string {
			p := v.(*utils.Policies)
			return ok(p.Persistence != nil && p.Persistence.BookkeeperEnsemble == 1 && p.DeduplicationEnabled != nil && *p.DeduplicationEnabled &&
				p.MessageTTLInSeconds == nil && p.RetentionPolicies == nil && slices.Equal(p.ReplicationClusters, []string{cluster}) &&
				p.Bundles != nil && p.Bundles.NumBundles == 1 && len(p.BacklogQuotaMap) == 1, "want persistence, deduplication and the quota, no TTL nor retention")
		}},
		{name: "namespaces remove persistence", call: func() (any, error) { return nil, nss.RemovePersistence(name) }},
		{name: "namespaces grant permission", call: func() (any, error) {
			return nil, nss.GrantNamespacePermission(*ns, "app", []utils.AuthAction{produce})
		}},
		{name: "namespaces permissions", call: func() (any, error) { return nss.GetNamespacePermissions(*ns) }, check: func(v any) string {
			return ok(slices.Equal(v.(map[string][]utils.AuthAction)["app"], []utils.AuthAction{produce}), "want app: produce")
		}},
		{name: "namespaces revoke permission", call: func() (any, error) { return nil, nss.RevokeNamespacePermission(*ns, "app") }},
		{name: "namespaces subscription permissions", call: func() (any, error) { return nss.GetSubPermissions(*ns) }, check: equal(map[string][]string{})},
		{name: "namespaces grant subscription permission", call: func() (any, error) { return nil, nss.GrantSubPermission(*ns, "s", []string{"app"}) }, want: 501},
		{name: "namespaces revoke subscription permission", call: func() (any, error) { return nil, nss.RevokeSubPermission(*ns, "s", "app") }, want: 404},
		{name: "namespaces subscription auth mode", call: func() (any, error) { return nil, nss.SetSubscriptionAuthMode(*ns, utils.Prefix) }},
		{name: "namespaces subscription auth mode, back", call: func() (any, error) { return nil, nss.SetSubscriptionAuthMode(*ns, utils.None) }},
		{name: "namespaces encryption not required", call: func() (any, error) { return nil, nss.SetEncryptionRequiredStatus(*ns, false) }},
		{name: "namespaces encryption required", call: func() (any, error) { return nil, nss.SetEncryptionRequiredStatus(*ns, true) }, want: 501},
		{name: "namespaces bookie affinity set", call: func() (any, error) {
			return nil, nss.SetBookieAffinityGroup(name, utils.BookieAffinityGroupData{BookkeeperAffinityGroupPrimary: "a"})
		}, want: 501},
		{name: "namespaces bookie affinity get", call: func() (any, error) { return nss.GetBookieAffinityGroup(name) }, want: 501},
		{name: "namespaces bookie affinity delete", call: func() (any, error) { return nil, nss.DeleteBookieAffinityGroup(name) }, want: 501},
		{name: "namespaces unload", call: func() (any, error) { return nil, nss.Unload(name) }},
		{name: "namespaces unload the bundle", call: func() (any, error) { return nil, nss.UnloadNamespaceBundle(name, "0x00000000_0xffffffff") }},
		{name: "namespaces unload another bundle", call: func() (any, error) { return nil, nss.UnloadNamespaceBundle(name, "0x00000000_0x80000000") }, want: 404},
		{name: "namespaces split bundle", call: func() (any, error) { return nil, nss.SplitNamespaceBundle(name, "0x00000000_0xffffffff", false) }, want: 501},
		{name: "namespaces delete bundle", call: func() (any, error) { return nil, nss.DeleteNamespaceBundle(name, "0x00000000_0xffffffff") }, want: 501},
		// Anti-affinity namespaces of a cluster: /namespaces/{cluster}/antiAffinity/{group} cannot share the router with
		// /namespaces/{tenant}/{namespace}/..., so it is an unknown path.
		{name: "namespaces anti-affinity namespaces", call: func() (any, error) { return nss.GetAntiAffinityNamespaces("public", cluster, "g") }, want: 404},
	})

	// Schema policies: the strategy new schema versions are checked with
	// (UNDEFINED: the broker's), and schema validation.
	runAdminCalls(t, []adminCall{
		{name: "namespaces get schema compatibility strategy, unset", call: func() (any, error) { return nss.GetSchemaCompatibilityStrategy(*ns) },
			check: equal(utils.SchemaCompatibilityStrategyUndefined)},
		{name: "namespaces set schema compatibility strategy", call: func() (any, error) {
			return nil, nss.SetSchemaCompatibilityStrategy(*ns, utils.SchemaCompatibilityStrategyBackwardTransitive)
		}},
		{name: "namespaces get schema compatibility strategy", call: func() (any, error) { return nss.GetSchemaCompatibilityStrategy(*ns) },
			check: equal(utils.SchemaCompatibilityStrategyBackwardTransitive)},
		{name: "namespaces policies show the strategy", call: func() (any, error) { return nss.GetPolicies(name) }, check: func(v any) string {
			return ok(v.(*utils.Policies).SchemaCompatibilityStrategy == utils.SchemaCompatibilityStrategyBackwardTransitive, "want BACKWARD_TRANSITIVE")
		}},
		{name: "namespaces set schema compatibility strategy, unknown", call: func() (any, error) {
			return nil, nss.SetSchemaCompatibilityStrategy(*ns, utils.SchemaCompatibilityStrategy("SIDEWAYS"))
		}, want: 400},
		{name: "namespaces set schema compatibility strategy, undefined", call: func() (any, error) {
			return nil, nss.SetSchemaCompatibilityStrategy(*ns, utils.SchemaCompatibilityStrategyUndefined)
		}},
		{name: "namespaces get schema compatibility strategy, reset", call: func() (any, error) { return nss.GetSchemaCompatibilityStrategy(*ns) },
			check: equal(utils.SchemaCompatibilityStrategyUndefined)},
		{name: "namespaces set schema validation", call: func() (any, error) { return nil, nss.SetSchemaValidationEnforced(*ns, true) }},
		{name: "namespaces get schema validation", call: func() (any, error) { return nss.GetSchemaValidationEnforced(*ns) }, check: equal(true)},
		{name: "namespaces unset schema validation", call: func() (any, error) { return nil, nss.SetSchemaValidationEnforced(*ns, false) }},
		{name: "namespaces get schema validation, unset", call: func() (any, error) { return nss.GetSchemaValidationEnforced(*ns) }, check: equal(false)},
	})

	// Namespace policies Magnetar does not have: 501, never ignored.
	var none []adminCall
	add := func(what string, call func() (any, error)) {
		none = append(none, adminCall{name: "namespaces " + what, call: call, want: 501})
	}
	rate := utils.DispatchRate{DispatchThrottlingRateInMsg: 10, RatePeriodInSecond: 1}
	add("set topic auto-creation", func() (any, error) {
		return nil, nss.SetTopicAutoCreation(*ns, utils.TopicAutoCreationConfig{Allow: true})
	})
	add("get topic auto-creation", func() (any, error) { return nss.GetTopicAutoCreation(*ns) })
	add("remove topic auto-creation", func() (any, error) { return nil, nss.RemoveTopicAutoCreation(*ns) })
	add("set schema auto-update strategy", func() (any, error) { return nil, nss.SetSchemaAutoUpdateCompatibilityStrategy(*ns, utils.Full) })
	add("get schema auto-update strategy", func() (any, error) { return nss.GetSchemaAutoUpdateCompatibilityStrategy(*ns) })
	add("clear offload deletion lag", func() (any, error) { return nil, nss.ClearOffloadDeleteLag(*ns) })
	add("set offload deletion lag", func() (any, error) { return nil, nss.SetOffloadDeleteLag(*ns, 1000) })
	add("get offload deletion lag", func() (any, error) { return nss.GetOffloadDeleteLag(*ns) })
	add("set offload threshold", func() (any, error) { return nil, nss.SetOffloadThreshold(*ns, 1000) })
	add("get offload threshold", func() (any, error) { return nss.GetOffloadThreshold(*ns) })
	add("set offload threshold in seconds", func() (any, error) { return nil, nss.SetOffloadThresholdInSeconds(*ns, 1000) })
	add("get offload threshold in seconds", func() (any, error) { return nss.GetOffloadThresholdInSeconds(*ns) })
	add("set compaction threshold", func() (any, error) { return nil, nss.SetCompactionThreshold(*ns, 1000) })
	add("get compaction threshold", func() (any, error) { return nss.GetCompactionThreshold(*ns) })
	add("set max consumers per subscription", func() (any, error) { return nil, nss.SetMaxConsumersPerSubscription(*ns, 3) })
	add("get max consumers per subscription", func() (any, error) { return nss.GetMaxConsumersPerSubscription(*ns) })
	add("remove max consumers per subscription", func() (any, error) { return nil, nss.RemoveMaxConsumersPerSubscription(*ns) })
	add("set max consumers per topic", func() (any, error) { return nil, nss.SetMaxConsumersPerTopic(*ns, 3) })
	add("get max consumers per topic", func() (any, error) { return nss.GetMaxConsumersPerTopic(*ns) })
	add("remove max consumers per topic", func() (any, error) { return nil, nss.RemoveMaxConsumersPerTopic(*ns) })
	add("set max producers per topic", func() (any, error) { return nil, nss.SetMaxProducersPerTopic(*ns, 3) })
	add("get max producers per topic", func() (any, error) { return nss.GetMaxProducersPerTopic(*ns) })
	add("remove max producers per topic", func() (any, error) { return nil, nss.RemoveMaxProducersPerTopic(*ns) })
	add("set max topics", func() (any, error) { return nil, nss.SetMaxTopicsPerNamespace(*ns, 3) })
	add("get max topics", func() (any, error) { return nss.GetMaxTopicsPerNamespace(*ns) })
	add("remove max topics", func() (any, error) { return nil, nss.RemoveMaxTopicsPerNamespace(*ns) })
	add("get replication clusters", func() (any, error) { return nss.GetNamespaceReplicationClusters(name) })
	add("set replication clusters", func() (any, error) { return nil, nss.SetNamespaceReplicationClusters(name, []string{cluster}) })
	add("set anti-affinity group", func() (any, error) { return nil, nss.SetNamespaceAntiAffinityGroup(name, "g") })
	add("get anti-affinity group", func() (any, error) { return nss.GetNamespaceAntiAffinityGroup(name) })
	add("delete anti-affinity group", func() (any, error) { return nil, nss.DeleteNamespaceAntiAffinityGroup(name) })
	add("set replicator dispatch rate", func() (any, error) { return nil, nss.SetReplicatorDispatchRate(*ns, rate) })
	add("get replicator dispatch rate", func() (any, error) { return nss.GetReplicatorDispatchRate(*ns) })
	add("set subscription dispatch rate", func() (any, error) { return nil, nss.SetSubscriptionDispatchRate(*ns, rate) })
	add("get subscription dispatch rate", func() (any, error) { return nss.GetSubscriptionDispatchRate(*ns) })
	add("set subscribe rate", func() (any, error) { return nil, nss.SetSubscribeRate(*ns, utils.SubscribeRate{RatePeriodInSecond: 1}) })
	add("get subscribe rate", func() (any, error) { return nss.GetSubscribeRate(*ns) })
	add("set dispatch rate", func() (any, error) { return nil, nss.SetDispatchRate(*ns, rate) })
	add("get dispatch rate", func() (any, error) { return nss.GetDispatchRate(*ns) })
	add("set publish rate", func() (any, error) {
		return nil, nss.SetPublishRate(*ns, utils.PublishRate{PublishThrottlingRateInMsg: 10})
	})
	add("get publish rate", func() (any, error) { return nss.GetPublishRate(*ns) })
	add("set schema auto-update", func() (any, error) { return nil, nss.SetIsAllowAutoUpdateSchema(*ns, true) })
	add("get schema auto-update", func() (any, error) { return nss.GetIsAllowAutoUpdateSchema(*ns) })
	add("get inactive topic policies", func() (any, error) { return nss.GetInactiveTopicPolicies(*ns) })
	add("remove inactive topic policies", func() (any, error) { return nil, nss.RemoveInactiveTopicPolicies(*ns) })
	add("set inactive topic policies", func() (any, error) { return nil, nss.SetInactiveTopicPolicies(*ns, utils.InactiveTopicPolicies{}) })
	add("get subscription expiration", func() (any, error) { return nss.GetSubscriptionExpirationTime(*ns) })
	add("set subscription expiration", func() (any, error) { return nil, nss.SetSubscriptionExpirationTime(*ns, 60) })
	add("remove subscription expiration", func() (any, error) { return nil, nss.RemoveSubscriptionExpirationTime(*ns) })
	add("update properties", func() (any, error) { return nil, nss.UpdateProperties(*ns, map[string]string{"a": "b"}) })
	add("get properties", func() (any, error) { return nss.GetProperties(*ns) })
	add("remove properties", func() (any, error) { return nil, nss.RemoveProperties(*ns) })
	runAdminCalls(t, none)

	// Topics.
	send("persistent://public/ns1/plain", 5)
	ended := topicName("persistent://public/ns1/ended")
	send(ended.String(), 3)
	runAdminCalls(t, []adminCall{
		{name: "topics create partitioned", call: func() (any, error) { return nil, topics.Create(parted, 2) }},
		{name: "topics create partitioned, existing", call: func() (any, error) { return nil, topics.Create(parted, 2) }, want: 409},
		{name: "topics create non-partitioned", call: func() (any, error) { return nil, topics.Create(topicName("persistent://public/ns1/made"), 0) }},
		{name: "topics create with properties", call: func() (any, error) {
			return nil, topics.CreateWithProperties(topicName("persistent://public/ns1/props"), 2, map[string]string{"a": "b"})
		}, want: 501},
		{name: "topics metadata", call: func() (any, error) { return topics.GetMetadata(parted) }, check: func(v any) string {
			return ok(v.(utils.PartitionedTopicMetadata).Partitions == 2, "want 2 partitions")
		}},
		{name: "topics update partitions", call: func() (any, error) { return nil, topics.Update(parted, 3) }},
		{name: "topics update partitions, fewer", call: func() (any, error) { return nil, topics.Update(parted, 2) }, want: 400},
		{name: "topics metadata, updated", call: func() (any, error) { return topics.GetMetadata(parted) }, check: func(v any) string {
			return ok(v.(utils.PartitionedTopicMetadata).Partitions == 3, "want 3 partitions")
		}},
		{name: "topics list", call: func() (any, error) {
			p, np, err := topics.List(*ns)
			return [2][]string{p, np}, err
		}, check: func(v any) string {
			l := v.([2][]string)
			return ok(slices.Equal(l[0], []string{"persistent://public/ns1/parted"}) && slices.Contains(l[1], "persistent://public/ns1/plain") &&
				slices.Contains(l[1], "persistent://public/ns1/made") && slices.Contains(l[1], "persistent://public/ns1/parted-partition-2"),
				"want parted among the partitioned ones; plain, made and parted's partitions among the others")
		}},
		{name: "namespaces topics", call: func() (any, error) { return nss.GetTopics(name) }, check: func(v any) string {
			l := v.([]string)
			return ok(slices.Contains(l, "persistent://public/ns1/plain") && slices.Contains(l, "persistent://public/ns1/parted-partition-0"), "want plain and the partitions")
		}},
		{name: "topics properties", call: func() (any, error) { return topics.GetProperties(plain) }, check: equal(map[string]string{})},
		{name: "topics update properties", call: func() (any, error) { return nil, topics.UpdateProperties(plain, map[string]string{"a": "b"}) }, want: 501},
		{name: "topics remove property", call: func() (any, error) { return nil, topics.RemoveProperty(plain, "a") }, want: 501},
		{name: "topics lookup", call: func() (any, error) { return topics.Lookup(plain) }, check: func(v any) string {
			l := v.(utils.LookupData)
			return ok(l.BrokerURL == "pulsar://"+s.brokerAddr && l.HTTPURL == "http://"+s.httpAddr, "want this broker's URLs (Pulsar's protocol on its client port)")
		}},
		{name: "topics lookup, partitioned", call: func() (any, error) { return topics.Lookup(parted) }, want: 405},
		{name: "topics lookup, partition", call: func() (any, error) { return topics.Lookup(part0) }, check: func(v any) string {
			return ok(v.(utils.LookupData).BrokerURL == "pulsar://"+s.brokerAddr, "want this broker")
		}},
		{name: "topics bundle", call: func() (any, error) { return topics.GetBundleRange(plain) }, check: equal("0x00000000_0xffffffff")},
		{name: "topics last message id", call: func() (any, error) { return topics.GetLastMessageID(plain) }, check: func(v any) string {
			id := v.(utils.MessageID)
			return ok(id.EntryID == 4 && id.PartitionIndex == -1, "want the fifth entry")
		}},
		{name: "topics message id by time", call: func() (any, error) { return topics.GetMessageID(plain, 0) }, check: func(v any) string {
			return ok(v.(utils.MessageID).EntryID == 0, "want the first entry")
		}},
		{name: "topics message id by time, future", call: func() (any, error) { return topics.GetMessageID(plain, time.Now().Add(time.Hour).UnixMilli()) }, want: 404},
		{name: "topics stats", call: func() (any, error) { return topics.GetStats(plain) }, check: func(v any) string {
			st := v.(utils.TopicStats)
			return ok(st.MsgCounterIn == 5 && st.StorageSize > 0, "want 5 messages in and storage")
		}},
		{name: "topics stats with options", call: func() (any, error) {
			return topics.GetStatsWithOption(plain, utils.GetStatsOptions{GetPreciseBacklog: true})
		}, check: func(v any) string { return ok(v.(utils.TopicStats).MsgCounterIn == 5, "want 5 messages in") }},
		{name: "topics internal stats", call: func() (any, error) { return topics.GetInternalStats(plain) }, check: func(v any) string {
			st := v.(utils.PersistentTopicInternalStats)
			return ok(st.NumberOfEntries == 5 && len(st.Ledgers) >= 1 && strings.HasSuffix(st.LastConfirmedEntry, ":4"), "want 5 entries")
		}},
		{name: "topics internal info", call: func() (any, error) { return topics.GetInternalInfo(plain) }, check: func(v any) string {
			return ok(len(v.(utils.ManagedLedgerInfo).Ledgers) >= 1, "want the ledgers")
		}},
		{name: "topics partitioned stats", call: func() (any, error) { return topics.GetPartitionedStats(parted, true) }, check: func(v any) string {
			st := v.(utils.PartitionedTopicStats)
			return ok(st.Metadata.Partitions == 3 && len(st.Partitions) == 3, "want 3 partitions, each with stats")
		}},
		{name: "topics partitioned stats, not per partition", call: func() (any, error) {
			return topics.GetPartitionedStatsWithOption(parted, false, utils.GetStatsOptions{})
		}, check: func(v any) string {
			st := v.(utils.PartitionedTopicStats)
			return ok(st.Metadata.Partitions == 3 && len(st.Partitions) == 0, "want the sums only")
		}},
		{name: "topics partitioned stats of a plain topic", call: func() (any, error) { return topics.GetPartitionedStats(plain, true) }, want: 404},
		{name: "topics grant permission", call: func() (any, error) {
			return nil, topics.GrantPermission(plain, "app", []utils.AuthAction{consume})
		}},
		{name: "topics permissions", call: func() (any, error) { return topics.GetPermissions(plain) }, check: func(v any) string {
			return ok(slices.Equal(v.(map[string][]utils.AuthAction)["app"], []utils.AuthAction{consume}), "want app: consume")
		}},
		{name: "topics revoke permission", call: func() (any, error) { return nil, topics.RevokePermission(plain, "app") }},
		{name: "topics unload", call: func() (any, error) { return nil, topics.Unload(plain) }},
		{name: "topics terminate", call: func() (any, error) { return topics.Terminate(ended) }, check: func(v any) string {
			id := v.(utils.MessageID)
			return ok(id.EntryID == 2 && id.PartitionIndex == -1, "want the last (third) entry")
		}},
		{name: "topics terminate, again", call: func() (any, error) { return topics.Terminate(ended) }, check: func(v any) string {
			return ok(v.(utils.MessageID).EntryID == 2, "want the same last entry")
		}},
		{name: "topics internal stats, terminated", call: func() (any, error) { return topics.GetInternalStats(ended) }, check: func(v any) string {
			return ok(v.(utils.PersistentTopicInternalStats).State == "Terminated", "want state Terminated")
		}},
		{name: "topics terminate, partitioned", call: func() (any, error) { return topics.Terminate(parted) }, want: 405},
		{name: "topics offload", call: func() (any, error) { return nil, topics.Offload(plain, utils.Latest) }, want: 501},
		{name: "topics offload status", call: func() (any, error) { return topics.OffloadStatus(plain) }, want: 501},
		{name: "topics compact", call: func() (any, error) { return nil, topics.Compact(plain) }, want: 501},
		{name: "topics compact status", call: func() (any, error) { return topics.CompactStatus(plain) }, want: 501},
	})

	// Topic-level policies: 405, Pulsar's answer with them off.
	none = nil
	pol := func(what string, call func() (any, error)) {
		none = append(none, adminCall{name: "topics " + what, call: call, want: 405})
	}
	dr := utils.DispatchRateData{DispatchThrottlingRateInMsg: 10, RatePeriodInSecond: 1}
	pol("get message TTL", func() (any, error) { return topics.GetMessageTTL(plain) })
	pol("set message TTL", func() (any, error) { return nil, topics.SetMessageTTL(plain, 10) })
	pol("remove message TTL", func() (any, error) { return nil, topics.RemoveMessageTTL(plain) })
	pol("get max producers", func() (any, error) { return topics.GetMaxProducers(plain) })
	pol("set max producers", func() (any, error) { return nil, topics.SetMaxProducers(plain, 1) })
	pol("remove max producers", func() (any, error) { return nil, topics.RemoveMaxProducers(plain) })
	pol("get max consumers", func() (any, error) { return topics.GetMaxConsumers(plain) })
	pol("set max consumers", func() (any, error) { return nil, topics.SetMaxConsumers(plain, 1) })
	pol("remove max consumers", func() (any, error) { return nil, topics.RemoveMaxConsumers(plain) })
	pol("get max unacked per consumer", func() (any, error) { return topics.GetMaxUnackMessagesPerConsumer(plain) })
	pol("set max unacked per consumer", func() (any, error) { return nil, topics.SetMaxUnackMessagesPerConsumer(plain, 1) })
	pol("remove max unacked per consumer", func() (any, error) { return nil, topics.RemoveMaxUnackMessagesPerConsumer(plain) })
	pol("get max unacked per subscription", func() (any, error) { return topics.GetMaxUnackMessagesPerSubscription(plain) })
	pol("set max unacked per subscription", func() (any, error) { return nil, topics.SetMaxUnackMessagesPerSubscription(plain, 1) })
	pol("remove max unacked per subscription", func() (any, error) { return nil, topics.RemoveMaxUnackMessagesPerSubscription(plain) })
	pol("get persistence", func() (any, error) { return topics.GetPersistence(plain) })
	pol("set persistence", func() (any, error) { return nil, topics.SetPersistence(plain, utils.PersistenceData{}) })
	pol("remove persistence", func() (any, error) { return nil, topics.RemovePersistence(plain) })
	pol("get delayed delivery", func() (any, error) { return topics.GetDelayedDelivery(plain) })
	pol("set delayed delivery", func() (any, error) { return nil, topics.SetDelayedDelivery(plain, utils.DelayedDeliveryData{}) })
	pol("remove delayed delivery", func() (any, error) { return nil, topics.RemoveDelayedDelivery(plain) })
	pol("get dispatch rate", func() (any, error) { return topics.GetDispatchRate(plain) })
	pol("set dispatch rate", func() (any, error) { return nil, topics.SetDispatchRate(plain, dr) })
	pol("remove dispatch rate", func() (any, error) { return nil, topics.RemoveDispatchRate(plain) })
	pol("get publish rate", func() (any, error) { return topics.GetPublishRate(plain) })
	pol("set publish rate", func() (any, error) { return nil, topics.SetPublishRate(plain, utils.PublishRateData{}) })
	pol("remove publish rate", func() (any, error) { return nil, topics.RemovePublishRate(plain) })
	pol("get deduplication", func() (any, error) { return topics.GetDeduplicationStatus(plain) })
	pol("set deduplication", func() (any, error) { return nil, topics.SetDeduplicationStatus(plain, true) })
	pol("remove deduplication", func() (any, error) { return nil, topics.RemoveDeduplicationStatus(plain) })
	pol("get retention", func() (any, error) { return topics.GetRetention(plain, true) })
	pol("set retention", func() (any, error) { return nil, topics.SetRetention(plain, utils.RetentionPolicies{}) })
	pol("remove retention", func() (any, error) { return nil, topics.RemoveRetention(plain) })
	pol("get compaction threshold", func() (any, error) { return topics.GetCompactionThreshold(plain, true) })
	pol("set compaction threshold", func() (any, error) { return nil, topics.SetCompactionThreshold(plain, 1) })
	pol("remove compaction threshold", func() (any, error) { return nil, topics.RemoveCompactionThreshold(plain) })
	pol("get backlog quotas", func() (any, error) { return topics.GetBacklogQuotaMap(plain, true) })
	pol("set backlog quota", func() (any, error) {
		return nil, topics.SetBacklogQuota(plain, utils.NewBacklogQuota(1, -1, utils.ProducerException), utils.DestinationStorage)
	})
	pol("remove backlog quota", func() (any, error) { return nil, topics.RemoveBacklogQuota(plain, utils.DestinationStorage) })
	pol("get inactive topic policies", func() (any, error) { return topics.GetInactiveTopicPolicies(plain, true) })
	pol("remove inactive topic policies", func() (any, error) { return nil, topics.RemoveInactiveTopicPolicies(plain) })
	pol("set inactive topic policies", func() (any, error) { return nil, topics.SetInactiveTopicPolicies(plain, utils.InactiveTopicPolicies{}) })
	pol("get replication clusters", func() (any, error) { return topics.GetReplicationClusters(plain) })
	pol("set replication clusters", func() (any, error) { return nil, topics.SetReplicationClusters(plain, []string{cluster}) })
	pol("remove replication clusters", func() (any, error) { return nil, topics.RemoveReplicationClusters(plain) })
	pol("get subscribe rate", func() (any, error) { return topics.GetSubscribeRate(plain) })
	pol("set subscribe rate", func() (any, error) { return nil, topics.SetSubscribeRate(plain, utils.SubscribeRate{}) })
	pol("remove subscribe rate", func() (any, error) { return nil, topics.RemoveSubscribeRate(plain) })
	pol("get subscription dispatch rate", func() (any, error) { return topics.GetSubscriptionDispatchRate(plain) })
	pol("set subscription dispatch rate", func() (any, error) { return nil, topics.SetSubscriptionDispatchRate(plain, dr) })
	pol("remove subscription dispatch rate", func() (any, error) { return nil, topics.RemoveSubscriptionDispatchRate(plain) })
	pol("get max consumers per subscription", func() (any, error) { return topics.GetMaxConsumersPerSubscription(plain) })
	pol("set max consumers per subscription", func() (any, error) { return nil, topics.SetMaxConsumersPerSubscription(plain, 1) })
	pol("remove max consumers per subscription", func() (any, error) { return nil, topics.RemoveMaxConsumersPerSubscription(plain) })
	pol("get max message size", func() (any, error) { return topics.GetMaxMessageSize(plain) })
	pol("set max message size", func() (any, error) { return nil, topics.SetMaxMessageSize(plain, 1) })
	pol("remove max message size", func() (any, error) { return nil, topics.RemoveMaxMessageSize(plain) })
	pol("get max subscriptions", func() (any, error) { return topics.GetMaxSubscriptionsPerTopic(plain) })
	pol("set max subscriptions", func() (any, error) { return nil, topics.SetMaxSubscriptionsPerTopic(plain, 1) })
	pol("remove max subscriptions", func() (any, error) { return nil, topics.RemoveMaxSubscriptionsPerTopic(plain) })
	pol("get schema validation", func() (any, error) { return topics.GetSchemaValidationEnforced(plain) })
	pol("set schema validation", func() (any, error) { return nil, topics.SetSchemaValidationEnforced(plain, true) })
	pol("remove schema validation", func() (any, error) { return nil, topics.RemoveSchemaValidationEnforced(plain) })
	pol("get deduplication snapshot interval", func() (any, error) { return topics.GetDeduplicationSnapshotInterval(plain) })
	pol("set deduplication snapshot interval", func() (any, error) { return nil, topics.SetDeduplicationSnapshotInterval(plain, 1) })
	pol("remove deduplication snapshot interval", func() (any, error) { return nil, topics.RemoveDeduplicationSnapshotInterval(plain) })
	pol("get replicator dispatch rate", func() (any, error) { return topics.GetReplicatorDispatchRate(plain) })
	pol("set replicator dispatch rate", func() (any, error) { return nil, topics.SetReplicatorDispatchRate(plain, dr) })
	pol("remove replicator dispatch rate", func() (any, error) { return nil, topics.RemoveReplicatorDispatchRate(plain) })
	pol("get offload policies", func() (any, error) { return topics.GetOffloadPolicies(plain) })
	pol("set offload policies", func() (any, error) { return nil, topics.SetOffloadPolicies(plain, utils.OffloadPolicies{}) })
	pol("remove offload policies", func() (any, error) { return nil, topics.RemoveOffloadPolicies(plain) })
	pol("get auto subscription creation", func() (any, error) { return topics.GetAutoSubscriptionCreation(plain) })
	pol("set auto subscription creation", func() (any, error) {
		return nil, topics.SetAutoSubscriptionCreation(plain, utils.AutoSubscriptionCreationOverride{})
	})
	pol("remove auto subscription creation", func() (any, error) { return nil, topics.RemoveAutoSubscriptionCreation(plain) })
	pol("get schema compatibility strategy", func() (any, error) { return topics.GetSchemaCompatibilityStrategy(plain) })
	pol("get schema compatibility strategy applied", func() (any, error) { return topics.GetSchemaCompatibilityStrategyApplied(plain, true) })
	pol("set schema compatibility strategy", func() (any, error) {
		return nil, topics.SetSchemaCompatibilityStrategy(plain, utils.SchemaCompatibilityStrategyAlwaysCompatible)
	})
	pol("remove schema compatibility strategy", func() (any, error) { return nil, topics.RemoveSchemaCompatibilityStrategy(plain) })
	runAdminCalls(t, none)

	// Subscriptions. plain holds m-0..m-4; "s" starts at the first.
	runAdminCalls(t, []adminCall{
		{name: "subscriptions create", call: func() (any, error) { return nil, subs.Create(plain, "s", utils.Earliest) }},
		{name: "subscriptions create, existing", call: func() (any, error) { return nil, subs.Create(plain, "s", utils.Earliest) }, want: 409},
		{name: "subscriptions create on a partitioned topic", call: func() (any, error) { return nil, subs.Create(parted, "ps", utils.Latest) }},
		{name: "subscriptions list", call: func() (any, error) { return subs.List(plain) }, check: equal([]string{"s"})},
		{name: "subscriptions list, partitioned", call: func() (any, error) { return subs.List(parted) }, check: equal([]string{"ps"})},
		{name: "subscriptions peek 2", call: func() (any, error) { return subs.PeekMessages(plain, "s", 2) }, check: func(v any) string {
			m := v.([]*utils.Message)
			return ok(len(m) == 2 && string(m[0].Payload) == "m-0" && string(m[1].Payload) == "m-1" && m[0].Properties["n"] == "0" &&
				m[0].Properties["publish-time"] != "" && m[0].GetMessageID().EntryID == 0, "want m-0 and m-1 with their properties")
		}},
		{name: "subscriptions peek, partitioned", call: func() (any, error) { return subs.PeekMessages(parted, "ps", 1) }, want: 405},
		{name: "subscriptions message by id", call: func() (any, error) {
			id, err := topics.GetLastMessageID(plain)
			if err != nil {
				return nil, err
			}
			return subs.GetMessageByID(plain, id.LedgerID, id.EntryID)
		}, check: func(v any) string { return ok(string(v.(*utils.Message).Payload) == "m-4", "want m-4") }},
		{name: "subscriptions message by id, unknown", call: func() (any, error) { return subs.GetMessagesByID(plain, 1<<40, 0) }, want: 404},
		{name: "subscriptions skip 2", call: func() (any, error) { return nil, subs.SkipMessages(plain, "s", 2) }},
		{name: "subscriptions peek after the skip", call: func() (any, error) { return subs.PeekMessages(plain, "s", 1) }, check: func(v any) string {
			return ok(string(v.([]*utils.Message)[0].Payload) == "m-2", "want m-2")
		}},
		{name: "subscriptions skip, partitioned", call: func() (any, error) { return nil, subs.SkipMessages(parted, "ps", 1) }, want: 405},
		{name: "subscriptions reset to a message id", call: func() (any, error) {
			id, err := topics.GetMessageID(plain, 0)
			if err != nil {
				return nil, err
			}
			return nil, subs.ResetCursorToMessageID(plain, "s", id)
		}},
		{name: "subscriptions peek after the reset", call: func() (any, error) { return subs.PeekMessages(plain, "s", 1) }, check: func(v any) string {
			return ok(string(v.([]*utils.Message)[0].Payload) == "m-0", "want m-0")
		}},
		{name: "subscriptions expire, none old enough", call: func() (any, error) { return nil, subs.ExpireMessages(plain, "s", 3600) }},
		{name: "subscriptions peek after no expiry", call: func() (any, error) { return subs.PeekMessages(plain, "s", 1) }, check: func(v any) string {
			return ok(string(v.([]*utils.Message)[0].Payload) == "m-0", "want m-0")
		}},
		{name: "subscriptions expire all", call: func() (any, error) { return nil, subs.ExpireAllMessages(plain, 0) }},
		{name: "subscriptions peek after expiry", call: func() (any, error) { return subs.PeekMessages(plain, "s", 1) }, want: 404},
		{name: "subscriptions reset to a time", call: func() (any, error) { return nil, subs.ResetCursorToTimestamp(plain, "s", 0) }},
		{name: "subscriptions stats after the reset", call: func() (any, error) { return topics.GetStats(plain) }, check: func(v any) string {
			st := v.(utils.TopicStats).Subscriptions["s"]
			return ok(st.MsgBacklog == 5 && st.SubType == "Exclusive", "want a backlog of 5, an Exclusive subscription")
		}},
		// A cursor in the internal stats, as pulsaradmin decodes it (the
		// acknowledgement holes are a string, "[...]", in Pulsar's shape).
		{name: "topics internal stats with a cursor", call: func() (any, error) { return topics.GetInternalStats(plain) }, check: func(v any) string {
			c, found := v.(utils.PersistentTopicInternalStats).Cursors["s"]
			return ok(found && c.MarkDeletePosition != "" && c.IndividuallyDeletedMessages == "[]", fmt.Sprintf("want cursor s with no holes, got %+v", c))
		}},
		{name: "subscriptions clear backlog", call: func() (any, error) { return nil, subs.ClearBacklog(plain, "s") }},
		{name: "subscriptions stats after clearing", call: func() (any, error) { return topics.GetStats(plain) }, check: func(v any) string {
			return ok(v.(utils.TopicStats).Subscriptions["s"].MsgBacklog == 0, "want no backlog")
		}},
		{name: "subscriptions clear backlog, partitioned", call: func() (any, error) { return nil, subs.ClearBacklog(parted, "ps") }},
		{name: "subscriptions expire, partitioned", call: func() (any, error) { return nil, subs.ExpireMessages(parted, "ps", 0) }},
		{name: "subscriptions clear backlog, unknown", call: func() (any, error) { return nil, subs.ClearBacklog(plain, "nobody") }, want: 404},
		{name: "subscriptions delete", call: func() (any, error) { return nil, subs.Delete(plain, "s") }},
		{name: "subscriptions delete, gone", call: func() (any, error) { return nil, subs.Delete(plain, "s") }, want: 404},
		{name: "subscriptions force delete, partitioned", call: func() (any, error) { return nil, subs.ForceDelete(parted, "ps") }},
		{name: "subscriptions list after deletion", call: func() (any, error) { return subs.List(parted) }, check: equal([]string{})},
	})

	// Namespace-wide backlog and unsubscribe calls, then deletion.
	send("persistent://public/ns1/plain", 3)
	runAdminCalls(t, []adminCall{
		{name: "subscriptions create again", call: func() (any, error) { return nil, subs.Create(plain, "a", utils.Earliest) }},
		{name: "subscriptions create b", call: func() (any, error) { return nil, subs.Create(plain, "b", utils.Earliest) }},
		{name: "namespaces clear backlog of a", call: func() (any, error) { return nil, nss.ClearNamespaceBacklogForSubscription(*ns, "a") }},
		{name: "stats after clearing a", call: func() (any, error) { return topics.GetStats(plain) }, check: func(v any) string {
			st := v.(utils.TopicStats)
			return ok(st.Subscriptions["a"].MsgBacklog == 0 && st.Subscriptions["b"].MsgBacklog == 8, "want a cleared, b's 8 left")
		}},
		{name: "namespaces clear bundle backlog", call: func() (any, error) { return nil, nss.ClearNamespaceBundleBacklog(*ns, "0x00000000_0xffffffff") }},
		{name: "stats after clearing all", call: func() (any, error) { return topics.GetStats(plain) }, check: func(v any) string {
			return ok(v.(utils.TopicStats).Subscriptions["b"].MsgBacklog == 0, "want b cleared")
		}},
		{name: "namespaces clear backlog", call: func() (any, error) { return nil, nss.ClearNamespaceBacklog(*ns) }},
		{name: "namespaces clear bundle backlog of b", call: func() (any, error) {
			return nil, nss.ClearNamespaceBundleBacklogForSubscription(*ns, "0x00000000_0xffffffff", "b")
		}},
		{name: "namespaces unsubscribe a", call: func() (any, error) { return nil, nss.UnsubscribeNamespace(*ns, "a") }},
		{name: "namespaces bundle unsubscribe b", call: func() (any, error) { return nil, nss.UnsubscribeNamespaceBundle(*ns, "0x00000000_0xffffffff", "b") }},
		{name: "subscriptions after unsubscribing", call: func() (any, error) { return subs.List(plain) }, check: equal([]string{})},
		{name: "namespaces delete, not empty", call: func() (any, error) { return nil, nss.DeleteNamespace(name) }, want: 409},
		{name: "topics delete partitioned", call: func() (any, error) { return nil, topics.Delete(parted, false, false) }},
		{name: "topics delete", call: func() (any, error) { return nil, topics.Delete(plain, true, true) }},
		{name: "topics delete made", call: func() (any, error) { return nil, topics.Delete(topicName("persistent://public/ns1/made"), false, true) }},
		{name: "topics delete terminated", call: func() (any, error) { return nil, topics.Delete(ended, false, true) }},
		{name: "topics delete, gone", call: func() (any, error) { return nil, topics.Delete(plain, false, true) }, want: 404},
		{name: "namespaces delete, emptied", call: func() (any, error) { return nil, nss.DeleteNamespace(name) }},
	})
}
