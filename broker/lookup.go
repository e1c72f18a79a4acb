package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/internal/netaddr"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// brokerInfo is a live broker's registration (brokers/available/<id>),
// under its session lease.
type brokerInfo struct {
	Address string `json:"address"`
	// HTTP is its admin REST address ("" if it serves none).
	HTTP string `json:"http,omitempty"`
	// Pulsar is its port of its own for Pulsar's protocol ("" if none:
	// its client address speaks it, without TLS); PulsarTLS, whether
	// that port takes TLS.
	Pulsar    string `json:"pulsar,omitempty"`
	PulsarTLS bool   `json:"pulsarTls,omitempty"`
	// Topics is how many topic partitions it owns.
	Topics int `json:"topics"`
	// Traffic over the last registration interval, per second, and the
	// CPU cores the process used over it.
	MsgRateIn   float64 `json:"msgRateIn"`
	MsgRateOut  float64 `json:"msgRateOut"`
	BytesRateIn float64 `json:"bytesRateIn"`
	CPU         float64 `json:"cpu"`
}

// registerInterval is how often a broker refreshes its registration (its
// load); balancing waits twice that after unloading, so that it sees the
// partitions settled on their new owners before it looks again.
const registerInterval = 2 * time.Second

// register writes the broker's registration with its current load.
func (s *Server) register(ctx context.Context) error {
	s.mu.Lock()
	info := brokerInfo{Address: s.id, HTTP: s.AdvertisedHTTPAddr(), Pulsar: s.AdvertisedPulsarAddr(), PulsarTLS: s.pulsarLn != nil && s.tls != nil,
		Topics: len(s.mu.topics)}
	s.mu.Unlock()
	r, cpu := s.load.sample(&s.traffic, time.Now())
	info.MsgRateIn, info.MsgRateOut, info.BytesRateIn, info.CPU = r.MsgIn, r.MsgOut, r.BytesIn, cpu
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = s.store.Put(ctx, metastore.BrokerAvailableKey(s.id), b, metastore.WithLease(s.session.Load().Lease()))
	return err
}

// registerLoop keeps the registration's load current.
func (s *Server) registerLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(registerInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		if err := s.register(ctx); err != nil {
			s.log.Warn("refreshing the broker registration failed", zap.Error(err))
		}
		cancel()
	}
}

// lookup returns the address of the broker that serves n: its owner; for
// a partition nobody owns, the least loaded live broker (this one then
// claims it at once, another one does when the client gets there).
func (s *Server) lookup(ctx context.Context, n topicname.Name) (string, error) {
	if err := s.md.checkPartitionName(ctx, n); err != nil {
		return "", err
	}
	path := topicPath(n)
	kv, err := s.store.Get(ctx, metastore.OwnerKey(path))
	switch {
	case err == nil:
		owner, _, _ := strings.Cut(string(kv.Value), "\n")
		return owner, nil
	case !errors.Is(err, metastore.ErrNotFound):
		return "", err
	}
	target, err := s.leastLoaded(ctx, path)
	if err != nil {
		return "", err
	}
	if target != s.id {
		return target, nil
	}
	if _, err := s.getTopic(ctx, n, true); err != nil {
		if errors.Is(err, ErrNotOwner) { // another broker claimed it meanwhile
			return s.lookupOwner(ctx, path)
		}
		return "", err
	}
	return s.id, nil
}

// lookupOwner returns the owner of a partition that has one.
func (s *Server) lookupOwner(ctx context.Context, path string) (string, error) {
	kv, err := s.store.Get(ctx, metastore.OwnerKey(path))
	if err != nil {
		if errors.Is(err, metastore.ErrNotFound) {
			return "", errorf(ErrServiceNotReady, "%s changed owner; look it up again", path)
		}
		return "", err
	}
	owner, _, _ := strings.Cut(string(kv.Value), "\n")
	return owner, nil
}

// leastLoaded picks the live broker owning the fewest partitions; among
// equals, one chosen by the topic's hash, so that concurrent lookups of
// one topic agree and lookups of many topics spread. A partition this
// broker just moved away for balance goes to another broker if there is
// one.
func (s *Server) leastLoaded(ctx context.Context, path string) (string, error) {
	var best []string
	fewest := -1
	skipSelf := s.stopping() || s.movedAway(path)
	live := 0
	err := s.store.ListAll(ctx, metastore.BrokersAvailablePrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var info brokerInfo
		if err := json.Unmarshal(kv.Value, &info); err != nil || info.Address == "" {
			return nil // not a broker this version understands
		}
		live++
		if info.Address == s.id && skipSelf {
			return nil
		}
		switch {
		case fewest < 0 || info.Topics < fewest:
			best, fewest = []string{info.Address}, info.Topics
		case info.Topics == fewest:
			best = append(best, info.Address)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(best) == 0 && live == 1 && !s.stopping() {
		best = []string{s.id} // moved away, but no other broker is left
	}
	if len(best) == 0 {
		return "", errorf(ErrServiceNotReady, "no live broker to serve %s", path)
	}
	h := fnv.New32a()
	h.Write([]byte(path))
	return best[int(h.Sum32()%uint32(len(best)))], nil
}

// unloadLost stops serving a partition this broker may no longer own (its
// session was lost, or its ledger was fenced): clients are disconnected
// and look it up again; its metadata writes fail if another broker owns it.
func (s *Server) unloadLost(t *topic) {
	s.mu.Lock()
	removed := s.mu.topics[t.path] == t
	if removed {
		delete(s.mu.topics, t.path)
	}
	s.mu.Unlock()
	if removed { // once per topic, whoever unloads it first
		s.metrics.ownership.WithLabelValues("lost").Inc()
	}
	ctx, cancel := context.WithTimeout(s.hardCtx, 5*time.Second)
	defer cancel()
	t.close(ctx)
	s.log.Info("partition unloaded", zap.String("topic", t.name.String()))
}

func (s *Server) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// sessionLoop watches the broker's session. When it is lost (the lease
// expired: the broker was cut off from etcd or paused longer than its
// TTL), its owner keys are gone and other brokers may own its partitions
// already: it stops serving every partition at once, without waiting for
// anything, then starts a new session and registers again. Safety does not
// rest on this (bookie fencing and guarded writes stop a deposed owner);
// it ends the service of clients by a broker that is no longer the owner.
func (s *Server) sessionLoop() {
	defer s.wg.Done()
	for {
		sess := s.session.Load()
		select {
		case <-s.stop:
			return
		case <-sess.Done():
		}
		if s.stopping() {
			return
		}
		s.log.Error("etcd session lost: unloading every partition", zap.Error(sess.Err()))
		s.metrics.sessionsLost.Inc()
		var wg sync.WaitGroup
		for _, t := range s.loadedTopics() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.unloadLost(t)
			}()
		}
		wg.Wait()
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			next, err := s.store.NewSession(ctx, s.cfg.SessionTTL)
			if err == nil {
				s.session.Store(next)
				if err = s.register(ctx); err != nil {
					next.Close()
				}
			}
			cancel()
			if err == nil {
				s.log.Info("new etcd session", zap.Int64("lease", int64(next.Lease())))
				break
			}
			s.log.Warn("starting a new etcd session failed", zap.Error(err))
			select {
			case <-time.After(backoff):
			case <-s.stop:
				return
			}
		}
	}
}

// redirectError sends an admin request to the broker that owns its topic.
type redirectError struct {
	owner, url string
}

func (e *redirectError) Error() string { return "owned by broker " + e.owner + ": see " + e.url }

// Location is the owner's URL for the request: the admin API answers 307
// with it (admin.Redirect).
func (e *redirectError) Location() string { return e.url }

var _ admin.Redirect = (*redirectError)(nil)

// ownedElsewhere reports, for an admin request about partition path,
// where to send it if another live broker owns the partition (nil if this
// broker owns it or nobody does).
func (s *Server) ownedElsewhere(ctx context.Context, path string, r *http.Request) error {
	kv, err := s.store.Get(ctx, metastore.OwnerKey(path))
	if errors.Is(err, metastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	owner, _, _ := strings.Cut(string(kv.Value), "\n")
	if owner == s.id {
		return nil
	}
	var info brokerInfo
	rkv, err := s.store.Get(ctx, metastore.BrokerAvailableKey(owner))
	if err == nil {
		err = json.Unmarshal(rkv.Value, &info)
	}
	if err != nil || info.HTTP == "" {
		return errorf(ErrServiceNotReady, "%s is owned by broker %s, which serves no admin API now; try again", path, owner)
	}
	u := *r.URL
	u.Scheme, u.Host = s.httpScheme(), info.HTTP
	return &redirectError{owner: owner, url: u.String()}
}

// liveBrokers returns the registrations of the live brokers, by address.
func (s *Server) liveBrokers(ctx context.Context) (map[string]brokerInfo, error) {
	out := map[string]brokerInfo{}
	err := s.store.ListAll(ctx, metastore.BrokersAvailablePrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var info brokerInfo
		if json.Unmarshal(kv.Value, &info) == nil && info.Address != "" {
			out[info.Address] = info
		}
		return nil
	})
	return out, err
}

// balanceOnce unloads the partitions toUnload picks; the next lookup of
// each assigns it to the least loaded broker.
func (s *Server) balanceOnce(ctx context.Context) (unloaded int, err error) {
	live, err := s.liveBrokers(ctx)
	delete(live, s.id)
	if err != nil || len(live) == 0 {
		return 0, err
	}
	others := slices.Collect(maps.Values(live))
	// Each partition's messages since the previous round (since it was
	// loaded, for a new one): what it carries now, not what it once did.
	var mine []topicLoad
	seen := make(map[*topic]int64)
	for _, t := range s.loadedTopics() {
		total := t.traffic.msgIn.Load() + t.traffic.msgOut.Load()
		seen[t] = total
		mine = append(mine, topicLoad{name: t.name, msgs: total - s.balanceSeen[t]})
	}
	s.balanceSeen = seen
	r, _ := s.load.sample(&s.traffic, time.Now())
	pick, reason := toUnload(mine, r.MsgIn+r.MsgOut, others)
	for _, i := range pick {
		s.markMovedAway(topicPath(mine[i].name))
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.unloadTopic(ctx, mine[i].name)
		cancel()
		if err != nil {
			s.log.Warn("unloading for balance failed", zap.String("topic", mine[i].name.String()), zap.Error(err))
			continue
		}
		unloaded++
	}
	if len(pick) > 0 {
		s.log.Info("unloaded partitions to balance the load", zap.String("reason", reason), zap.Int("unloaded", unloaded), zap.Int("owned", len(mine)))
	}
	return unloaded, nil
}

// movedAwayFor is how long lookups answered by a broker keep a partition
// it unloaded for balance off itself: long enough for every broker's
// registered count to be refreshed.
const movedAwayFor = 3 * registerInterval

// markMovedAway records that this broker unloads path for balance.
func (s *Server) markMovedAway(path string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.movedAway == nil {
		s.mu.movedAway = make(map[string]time.Time)
	}
	for p, until := range s.mu.movedAway {
		if now.After(until) {
			delete(s.mu.movedAway, p)
		}
	}
	s.mu.movedAway[path] = now.Add(movedAwayFor)
}

// movedAway reports whether this broker unloaded path for balance lately.
func (s *Server) movedAway(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.mu.movedAway[path]
	return ok && time.Now().Before(until)
}

// refuseMovedAway refuses to load a partition this broker just moved away
// for balance while another broker is live: a client that looked it up
// while the unload was in progress was sent back here, and must look it up
// again to reach its new place.
func (s *Server) refuseMovedAway(ctx context.Context, n topicname.Name) error {
	if !s.movedAway(topicPath(n)) {
		return nil
	}
	live, err := s.liveBrokers(ctx)
	if err != nil {
		return err
	}
	delete(live, s.id)
	if len(live) == 0 {
		return nil
	}
	return errorf(ErrNotOwner, "%s was just moved off this broker to balance the load: look it up again", n)
}

// topicLoad is what balancing knows of one owned partition.
type topicLoad struct {
	name topicname.Name
	msgs int64 // messages published and dispatched since the previous round
}

// minBalancedRate is the message rate (in plus out, per second) below
// which a broker is never unloaded for its traffic.
const minBalancedRate = 1000

// toUnload picks which of this broker's partitions to unload, at most
// maxUnloadPerRound, and says why. Two rules, both only when some other
// broker is below the mean, so that nothing flaps:
//   - Partition count: owning more than 1.2x the mean plus one, unload
//     down to the mean. A broker joining an idle cluster gets its share
//     within a few rounds.
//   - Traffic: with a message rate above 1.2x the mean plus
//     minBalancedRate, unload the busiest partitions (by messages since
//     the previous round, each assumed to carry its share of the rate) to
//     the least busy broker until the rate left is at the mean. A move
//     that would not lower the busier of the two brokers by 10% is not
//     made: it would only move the hot spot.
func toUnload(mine []topicLoad, myRate float64, others []brokerInfo) (pick []int, reason string) {
	n := float64(len(others) + 1)
	total, minTopics := len(mine), others[0].Topics
	rateSum, minRate := myRate, others[0].MsgRateIn+others[0].MsgRateOut
	for _, o := range others {
		total += o.Topics
		minTopics = min(minTopics, o.Topics)
		rateSum += o.MsgRateIn + o.MsgRateOut
		minRate = min(minRate, o.MsgRateIn+o.MsgRateOut)
	}
	mean := float64(total) / n
	if float64(len(mine)) > 1.2*mean+1 && float64(minTopics) < mean {
		excess := min(len(mine)-int(math.Ceil(mean)), maxUnloadPerRound)
		for i := 0; i < excess; i++ {
			pick = append(pick, i)
		}
		return pick, "partition count"
	}
	meanRate := rateSum / n
	if myRate <= 1.2*meanRate+minBalancedRate || minRate >= meanRate {
		return nil, ""
	}
	var msgSum int64
	order := make([]int, len(mine))
	for i := range mine {
		order[i] = i
		msgSum += mine[i].msgs
	}
	if msgSum == 0 {
		return nil, ""
	}
	otherRates := make([]float64, len(others))
	for i, o := range others {
		otherRates[i] = o.MsgRateIn + o.MsgRateOut
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(mine[b].msgs, mine[a].msgs) })
	left := myRate
	for _, i := range order {
		if left <= meanRate || len(pick) == maxUnloadPerRound {
			break
		}
		share := myRate * float64(mine[i].msgs) / float64(msgSum)
		to := slices.Index(otherRates, slices.Min(otherRates))
		if share == 0 || max(otherRates[to]+share, left-share) >= 0.9*left {
			continue
		}
		pick = append(pick, i)
		left -= share
		otherRates[to] += share
	}
	return pick, "message rate"
}

// maxUnloadPerRound bounds the partitions one balancing round unloads.
const maxUnloadPerRound = 50

// balanceLoop runs balanceOnce every LoadBalanceInterval.
func (s *Server) balanceLoop() {
	defer s.wg.Done()
	if s.cfg.LoadBalanceInterval <= 0 {
		return
	}
	tick := time.NewTicker(s.cfg.LoadBalanceInterval)
	defer tick.Stop()
	var lastUnload time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		if time.Since(lastUnload) < 2*registerInterval {
			continue
		}
		// Fresh loads first: ours, and the others' within registerInterval.
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		if err := s.register(ctx); err == nil {
			n, err := s.balanceOnce(ctx)
			if err != nil {
				s.log.Warn("load balancing failed", zap.Error(err))
			}
			if n > 0 {
				lastUnload = time.Now()
			}
		}
		cancel()
	}
}

// unloadNamespace unloads every owned partition of a namespace: this
// broker's itself, the others' by asking their owners (admin unload). It
// returns how many were unloaded and the first error.
func (s *Server) unloadNamespace(ctx context.Context, ns string) (int, error) {
	type owned struct{ path, owner string }
	var all []owned
	err := s.store.ListAll(ctx, metastore.OwnersPrefix+ns+"/", metastore.ListOptions{}, func(kv metastore.KV) error {
		owner, _, _ := strings.Cut(string(kv.Value), "\n")
		all = append(all, owned{strings.TrimPrefix(kv.Key, metastore.OwnersPrefix), owner})
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, o := range all {
		tn, err := topicname.ParsePath(o.path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if o.owner == s.id {
			err = s.unloadTopic(ctx, tn)
		} else {
			err = s.unloadRemote(ctx, o.owner, tn)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.path, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// unloadRemote asks broker owner to unload partition n.
func (s *Server) unloadRemote(ctx context.Context, owner string, n topicname.Name) error {
	var info brokerInfo
	kv, err := s.store.Get(ctx, metastore.BrokerAvailableKey(owner))
	if err == nil {
		err = json.Unmarshal(kv.Value, &info)
	}
	if err != nil || info.HTTP == "" {
		return errorf(ErrServiceNotReady, "broker %s serves no admin API now", owner)
	}
	u := url.URL{Scheme: "http", Host: info.HTTP, Path: adminPath(n) + "/unload"}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := s.peerDo(req)
	if err != nil {
		return errorf(ErrServiceNotReady, "broker %s: %v", owner, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return errorf(ErrServiceNotReady, "broker %s answered %d: %s", owner, resp.StatusCode, body)
	}
	return nil
}

// AdvertisedHTTPAddr is the admin address registered for other brokers
// and admin redirects (Config.AdvertisedHTTPAddress), "" without an admin
// API.
func (s *Server) AdvertisedHTTPAddr() string {
	return advertisedHTTP(s.cfg.AdvertisedHTTPAddress, s.HTTPAddr(), s.id)
}

// AdvertisedPulsarAddr is the address of the port of its own for
// Pulsar's protocol that lookups send clients to, "" without one.
func (s *Server) AdvertisedPulsarAddr() string {
	if s.pulsarLn == nil {
		return ""
	}
	return advertisedHTTP(s.cfg.AdvertisedPulsarAddress, s.pulsarLn.Addr().String(), s.id)
}

// PulsarAddr is the bound address of the port of its own for Pulsar's
// protocol, "" without one.
func (s *Server) PulsarAddr() string {
	if s.pulsarLn == nil {
		return ""
	}
	return s.pulsarLn.Addr().String()
}

// advertisedHTTP is the configured address if any; else the bound HTTP
// address, with the advertised client address's host in place of a host
// that binds every interface.
func advertisedHTTP(configured, bound, advertised string) string {
	if configured != "" || bound == "" {
		return configured
	}
	if !netaddr.Wildcard(bound) {
		return bound
	}
	_, port, _ := net.SplitHostPort(bound)
	if host, _, err := net.SplitHostPort(advertised); err == nil && !netaddr.Wildcard(advertised) {
		return net.JoinHostPort(host, port)
	}
	return bound
}

// healthChecks are the broker's: ready while it serves (not stopping) and
// its registration is in etcd under its live session; live while it runs
// (and the extra checks of WithHealthChecks hold).
func (s *Server) healthChecks() health.Checks {
	c := health.Checks{
		Live: s.health.Live,
		Ready: []health.Check{
			{Name: "serving", Fn: func(context.Context) error {
				if s.stopping() {
					return errors.New("the broker is stopping")
				}
				return nil
			}},
			{Name: "registered", Fn: func(ctx context.Context) error {
				return s.store.CheckHeld(ctx, metastore.BrokerAvailableKey(s.id), s.session.Load())
			}},
		},
	}
	c.Ready = append(c.Ready, s.health.Ready...)
	return c
}
