package broker_test

import (
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/broker"
)

// A broker stores two copies by default (Pulsar's 2/2/2), not one.
func TestDefaultReplication(t *testing.T) {
	c := broker.DefaultConfig()
	if c.Ensemble != 2 || c.WriteQuorum != 2 || c.AckQuorum != 2 {
		t.Fatalf("default replication %d/%d/%d, want 2/2/2", c.Ensemble, c.WriteQuorum, c.AckQuorum)
	}
}

func TestConfigValidate(t *testing.T) {
	good := broker.DefaultConfig()
	good.Metastore = []string{"127.0.0.1:2379", "https://etcd-1.example:2379", "unix://etcd.sock"}
	good.AdvertisedAddress = "broker-0.example:6650"
	good.BookieAddresses = map[string]string{"bookie-0": "10.0.0.1:3181"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	noHTTP := good
	noHTTP.HTTPListen = ""
	if err := noHTTP.Validate(); err != nil {
		t.Fatalf("no admin API: %v", err)
	}
	for name, tc := range map[string]struct {
		mod  func(*broker.Config)
		want string // a part of the error
	}{
		"listen without port":     {func(c *broker.Config) { c.Listen = "127.0.0.1" }, `--listen "127.0.0.1": missing port`},
		"listen port too big":     {func(c *broker.Config) { c.Listen = "127.0.0.1:65536" }, `--listen "127.0.0.1:65536": port 65536 is out of range 0..65535`},
		"http without port":       {func(c *broker.Config) { c.HTTPListen = "localhost" }, `--http "localhost": missing port`},
		"advertised without port": {func(c *broker.Config) { c.AdvertisedAddress = "127.0.0.1" }, `--advertised-address "127.0.0.1": missing port`},
		"advertised port 0":       {func(c *broker.Config) { c.AdvertisedAddress = "127.0.0.1:0" }, `--advertised-address "127.0.0.1:0": port 0 is out of range 1..65535`},
		"advertised without host": {func(c *broker.Config) { c.AdvertisedAddress = ":6650" }, `--advertised-address ":6650": missing host`},
		"no metastore":            {func(c *broker.Config) { c.Metastore = nil }, "--metastore"},
		"metastore without port":  {func(c *broker.Config) { c.Metastore = []string{"127.0.0.1:2379", "etcd-1"} }, `--metastore "etcd-1": missing port`},
		"metastore bad scheme":    {func(c *broker.Config) { c.Metastore = []string{"etcd://x:1"} }, `--metastore "etcd://x:1": scheme "etcd"`},
		"bookie address":          {func(c *broker.Config) { c.BookieAddresses = map[string]string{"b1": "10.0.0.1"} }, `--bookie-addresses b1="10.0.0.1": missing port`},
		"replication 3/2/3": {func(c *broker.Config) { c.Ensemble, c.WriteQuorum, c.AckQuorum = 3, 2, 3 },
			"--ensemble 3, --write-quorum 2, --ack-quorum 3: need ensemble >= write quorum >= ack quorum >= 1"},
		"replication 0/0/0": {func(c *broker.Config) { c.Ensemble, c.WriteQuorum, c.AckQuorum = 0, 0, 0 },
			"--ensemble 0, --write-quorum 0, --ack-quorum 0"},
		"ensemble below the default quorums": {func(c *broker.Config) { c.Ensemble = 1 }, "--ensemble 1, --write-quorum 2, --ack-quorum 2"},
		"dedup inactivity 0":                 {func(c *broker.Config) { c.DedupProducerInactivityTimeout = 0 }, "--dedup-producer-inactivity-timeout 0s: must be positive"},
		"dedup max producers":                {func(c *broker.Config) { c.DedupMaxProducers = 0 }, "--dedup-max-producers 0: at least 1"},
		"dedup snapshot every":               {func(c *broker.Config) { c.DedupSnapshotEntries = 0 }, "--dedup-snapshot-entries 0, --dedup-snapshot-interval 2m0s: must be positive"},
		"key-shared selector mistyped":       {func(c *broker.Config) { c.KeySharedSelector = "autosplit" }, `--key-shared-selector "autosplit": want consistent-hashing or auto-split`},
	} {
		c := good
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
	}
}
