// Package autoscaler scales the bookie StatefulSet of a Kubernetes
// deployment (magnetar autoscaler): out when the bookies' disks fill up
// or their write load stays high, in when both stay low, and in only
// through decommission, so that scaling in loses nothing:
//
//  1. the highest-ordinal bookie is decommissioned (autorecovery.
//     Decommission, refused when the bookies left would be fewer than the
//     largest ensemble of any ledger);
//  2. autorecovery moves its copies to the others; once it holds nothing
//     it is "decommissioned";
//  3. only then the StatefulSet's replicas are lowered (the StatefulSet
//     controller removes that pod, and keeps or deletes its volume claim
//     per its persistentVolumeClaimRetentionPolicy);
//  4. once its pod is gone, what the metastore keeps of it is forgotten,
//     so that a later scale-up starts a fresh bookie under that name.
//
// One change at a time, with a cooldown between changes; the decisions are
// a pure state machine (decide.go) stepped by observations. One instance
// acts at a time: leader election through a Lease (client-go). Every
// decision is logged with its reason and recorded as an Event on the
// StatefulSet; --dry-run records them without acting.
package autoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/metastore"
)

// Config of an autoscaler.
type Config struct {
	// ID names this instance in the Lease. Required.
	ID string
	// Namespace and StatefulSet: the bookies to scale. Lease: the name of
	// the leader election Lease, in the same namespace.
	Namespace, StatefulSet, Lease string
	Rules
	// Interval between two looks at the cluster.
	Interval time.Duration
	// DryRun decides and records but does not act.
	DryRun bool
	// LeaseDuration of the leader election (renewed at two thirds).
	LeaseDuration time.Duration
	Logger        *zap.Logger
}

// DrainingAnnotation, on the StatefulSet, names the bookie the
// autoscaler decommissioned to remove it, until it is forgotten: a drain
// started by anyone else never leads to a scale-in.
const DrainingAnnotation = "magnetar.io/autoscaler-draining"

// Autoscaler runs the decisions for one StatefulSet.
type Autoscaler struct {
	cfg   Config
	kube  kubernetes.Interface
	store *metastore.Store
	log   *zap.Logger
}

// New returns an autoscaler acting through kube on the bookies whose
// metadata is in store.
func New(cfg Config, kube kubernetes.Interface, store *metastore.Store) (*Autoscaler, error) {
	if cfg.ID == "" || cfg.Namespace == "" || cfg.StatefulSet == "" || cfg.Lease == "" {
		return nil, errors.New("autoscaler: id, namespace, statefulset and lease are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Autoscaler{cfg: cfg, kube: kube, store: store, log: cfg.Logger.With(zap.String("statefulset", cfg.Namespace+"/"+cfg.StatefulSet))}, nil
}

// Run campaigns for the Lease and, while it holds it, looks at the
// cluster every Interval and acts. It returns when ctx ends.
//
// The decisions run on Run's own goroutine, one term after the other:
// client-go calls OnStartedLeading on a goroutine of its own and returns
// from a term without waiting for it, so that callback only hands the
// term's context over. The Lease is not released on cancel: a successor
// waits for it to expire, by when this instance has stopped acting (a
// term's context ends at the renew deadline, before the lease duration).
func (a *Autoscaler) Run(ctx context.Context) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: a.cfg.Namespace, Name: a.cfg.Lease},
		Client:     a.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.cfg.ID},
	}
	for ctx.Err() == nil {
		terms := make(chan context.Context, 1)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: a.cfg.LeaseDuration,
			RenewDeadline: a.cfg.LeaseDuration * 2 / 3,
			RetryPeriod:   a.cfg.LeaseDuration / 6,
			Name:          a.cfg.Lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(term context.Context) {
					terms <- term
					<-term.Done()
				},
				OnStoppedLeading: func() { a.log.Info("autoscaler: not leading", zap.String("id", a.cfg.ID)) },
			},
		})
		if err != nil {
			return err
		}
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			le.Run(ctx)
		}()
		select {
		case term := <-terms:
			a.log.Info("autoscaler: leading", zap.String("id", a.cfg.ID))
			a.lead(term)
		case <-ran:
		}
		<-ran
	}
	return nil
}

// lead runs the decisions while this instance leads.
func (a *Autoscaler) lead(ctx context.Context) {
	bc := record.NewBroadcaster(record.WithContext(ctx))
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.kube.CoreV1().Events(a.cfg.Namespace)})
	defer bc.Shutdown()
	rec := bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "magnetar-autoscaler", Host: a.cfg.ID})
	d := newDecider(a.cfg.Rules, time.Now())
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	lastWait := ""
	for {
		o, ref, err := a.observe(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Warn("autoscaler: cannot see the cluster", zap.Error(err))
		} else {
			act := d.step(o)
			if act.Kind == Wait {
				if act.Reason != lastWait { // log a reason once, not every tick
					a.log.Info("autoscaler: waiting", zap.String("reason", act.Reason))
					lastWait = act.Reason
				}
			} else {
				lastWait = ""
				a.apply(ctx, d, act, ref, rec)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// apply carries out act, logging it and recording it as an Event.
func (a *Autoscaler) apply(ctx context.Context, d *decider, act Action, ref observed, rec record.EventRecorder) {
	log := a.log.With(zap.String("action", act.Kind.String()), zap.String("reason", act.Reason))
	if act.Bookie != "" {
		log = log.With(zap.String("bookie", act.Bookie))
	}
	if act.Replicas != 0 {
		log = log.With(zap.Int("replicas", act.Replicas))
	}
	if a.cfg.DryRun {
		log.Info("autoscaler: dry run, not acting")
		rec.Eventf(ref.ObjectReference, corev1.EventTypeNormal, "DryRun"+act.Kind.String(), "dry run: would %s: %s", describe(act), act.Reason)
		d.refused(time.Now()) // the same decision once per cooldown
		return
	}
	var err error
	switch act.Kind {
	case ScaleUp:
		err = a.scale(ctx, act.Replicas-1, act.Replicas)
	case ScaleDown:
		err = a.scale(ctx, act.Replicas+1, act.Replicas)
	case Decommission:
		// Recorded first: a successor must know the drain is ours.
		if err = a.setDraining(ctx, act.Bookie); err != nil {
			break
		}
		err = autorecovery.Decommission(ctx, a.store, act.Bookie)
		if errors.Is(err, autorecovery.ErrTooFewBookies) {
			log.Info("autoscaler: scale-in refused", zap.Error(err))
			rec.Eventf(ref.ObjectReference, corev1.EventTypeNormal, "ScaleInRefused", "not decommissioning %s: %v", act.Bookie, err)
			d.refused(time.Now())
			if err := a.setDraining(ctx, ""); err != nil {
				log.Warn("autoscaler: cannot clear the draining mark", zap.Error(err))
			}
			return
		}
	case Forget:
		err = autorecovery.Forget(ctx, a.store, act.Bookie)
		if err == nil && ref.ours == act.Bookie {
			err = a.setDraining(ctx, "")
		}
	}
	if errors.Is(err, autorecovery.ErrNotDecommissioned) {
		// A lost bookie whose copies are not all re-replicated yet: ask
		// again after a cooldown.
		d.refused(time.Now())
	}
	if err != nil {
		log.Warn("autoscaler: action failed", zap.Error(err))
		rec.Eventf(ref.ObjectReference, corev1.EventTypeWarning, act.Kind.String()+"Failed", "%s failed: %v", describe(act), err)
		return
	}
	log.Info("autoscaler: " + describe(act))
	rec.Eventf(ref.ObjectReference, corev1.EventTypeNormal, act.Kind.String(), "%s: %s", describe(act), act.Reason)
	d.acted()
}

func describe(act Action) string {
	switch act.Kind {
	case ScaleUp:
		return fmt.Sprintf("scaled the bookies up to %d", act.Replicas)
	case ScaleDown:
		return fmt.Sprintf("scaled the bookies down to %d (removing drained %s)", act.Replicas, act.Bookie)
	case Decommission:
		return fmt.Sprintf("decommissioning %s (its copies move to the other bookies)", act.Bookie)
	case Forget:
		return fmt.Sprintf("forgot removed bookie %s", act.Bookie)
	}
	return act.Kind.String()
}

// errReplicasChanged: the replicas are not what the decision was made on.
var errReplicasChanged = errors.New("autoscaler: the StatefulSet's replicas changed since the decision")

// scale sets the StatefulSet's replicas from from to to through its scale
// subresource, only if they still are from (someone else's change, or a
// stale observation, makes it fail: the next look decides again), and
// with the resource version read (a change in between fails it too).
func (a *Autoscaler) scale(ctx context.Context, from, to int) error {
	sts := a.kube.AppsV1().StatefulSets(a.cfg.Namespace)
	cur, err := sts.GetScale(ctx, a.cfg.StatefulSet, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if int(cur.Spec.Replicas) != from {
		return fmt.Errorf("%w: %d, not %d", errReplicasChanged, cur.Spec.Replicas, from)
	}
	next := &autoscalingv1.Scale{ObjectMeta: cur.ObjectMeta, Spec: autoscalingv1.ScaleSpec{Replicas: int32(to)}}
	_, err = sts.UpdateScale(ctx, a.cfg.StatefulSet, next, metav1.UpdateOptions{})
	return err
}

// setDraining records (or, with "", clears) the bookie the autoscaler is
// removing, as DrainingAnnotation on the StatefulSet.
func (a *Autoscaler) setDraining(ctx context.Context, id string) error {
	val := "null"
	if id != "" {
		b, _ := json.Marshal(id)
		val = string(b)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, DrainingAnnotation, val)
	_, err := a.kube.AppsV1().StatefulSets(a.cfg.Namespace).Patch(ctx, a.cfg.StatefulSet, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// observed is the StatefulSet an observation was made of.
type observed struct {
	*corev1.ObjectReference        // for Events
	ours                    string // its DrainingAnnotation
}

// observe reads the StatefulSet and the bookies' registrations and
// states.
func (a *Autoscaler) observe(ctx context.Context) (Observation, observed, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Interval)
	defer cancel()
	sts, err := a.kube.AppsV1().StatefulSets(a.cfg.Namespace).Get(ctx, a.cfg.StatefulSet, metav1.GetOptions{})
	if err != nil {
		return Observation{}, observed{}, err
	}
	ref := observed{ObjectReference: &corev1.ObjectReference{Kind: "StatefulSet", APIVersion: "apps/v1", Namespace: sts.Namespace, Name: sts.Name, UID: sts.UID, ResourceVersion: sts.ResourceVersion},
		ours: sts.Annotations[DrainingAnnotation]}
	o := Observation{Now: time.Now(), ReadyReplicas: int(sts.Status.ReadyReplicas), Ours: ref.ours}
	if sts.Spec.Replicas != nil {
		o.Replicas = int(*sts.Spec.Replicas)
	}
	o.Rolling = sts.Status.UpdateRevision != "" && sts.Status.CurrentRevision != sts.Status.UpdateRevision
	statuses, err := autorecovery.Bookies(ctx, a.store)
	if err != nil {
		return Observation{}, observed{}, err
	}
	byOrdinal := map[int]Bookie{}
	for _, s := range statuses {
		ord, ok := ordinal(a.cfg.StatefulSet, s.ID)
		if !ok {
			continue // not a bookie of this StatefulSet
		}
		b := Bookie{Ordinal: ord, ID: s.ID, State: s.State, Registered: s.Address != "", WriteBytesPerSec: s.WriteBytesPerSec}
		if total := s.DiskUsedBytes + s.DiskFreeBytes; total > 0 {
			b.DiskUsage = float64(s.DiskUsedBytes) / float64(total)
		}
		byOrdinal[ord] = b
	}
	for i := 0; i < o.Replicas; i++ {
		if _, ok := byOrdinal[i]; !ok {
			byOrdinal[i] = Bookie{Ordinal: i, ID: fmt.Sprintf("%s-%d", a.cfg.StatefulSet, i)}
		}
	}
	for _, i := range slices.Sorted(maps.Keys(byOrdinal)) {
		o.Bookies = append(o.Bookies, byOrdinal[i])
	}
	return o, ref, nil
}

// ordinal parses "<statefulset>-<n>", the bookie id of pod n (the chart
// starts bookies with --id=$(POD_NAME)).
func ordinal(sts, id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, sts+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}
