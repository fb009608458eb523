// Package lease tells a replica whether it is the one that writes: every
// replica of baton serves, the holder of a coordination.k8s.io Lease
// writes status (and Events), so that replicas never argue over one.
package lease

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Lease settings (client-go's leaderelection defaults, shorter to renew).
const (
	// DefaultDuration is how long a holder that stopped renewing keeps
	// the Lease; DefaultRetryPeriod how often each replica looks.
	DefaultDuration    = 15 * time.Second
	DefaultRetryPeriod = 2 * time.Second
)

// Elector tells whether this replica holds a Lease. It is client-go's
// leader election, on the controller's own REST client: a holder renews;
// another replica takes the Lease once it has seen it unchanged for the
// lease's duration (by its own clock, so skew between nodes does not
// matter).
type Elector struct {
	// Client is a REST client of coordination.k8s.io/v1.
	Client *rest.RESTClient
	// The Lease: Namespace/Name, held as Identity for Duration, looked at
	// every RetryPeriod (defaults DefaultDuration, DefaultRetryPeriod).
	Namespace, Name, Identity string
	Duration, RetryPeriod     time.Duration
	Log                       *zap.Logger
	// OnChange is called when the Lease is won or lost.
	OnChange func()

	leader atomic.Bool

	// The record last seen, and when it was first seen so.
	seen   string
	seenAt time.Time
}

// Leader reports whether this replica holds the Lease.
func (e *Elector) Leader() bool { return e.leader.Load() }

// Run takes and renews the Lease until ctx ends, then lets it go.
func (e *Elector) Run(ctx context.Context) {
	if e.Duration == 0 {
		e.Duration = DefaultDuration
	}
	if e.RetryPeriod == 0 {
		e.RetryPeriod = DefaultRetryPeriod
	}
	t := time.NewTicker(e.RetryPeriod)
	defer t.Stop()
	for {
		e.set(e.try(ctx))
		select {
		case <-ctx.Done():
			// Whatever the last try said (one cut short by the end of
			// ctx fails): release lets go only a Lease this replica holds.
			e.release()
			e.set(false)
			return
		case <-t.C:
		}
	}
}

func (e *Elector) set(leader bool) {
	if e.leader.Swap(leader) != leader {
		e.Log.Info("status writer", zap.Bool("leader", leader), zap.String("identity", e.Identity))
		if e.OnChange != nil {
			e.OnChange()
		}
	}
}

// try takes or renews the Lease, and reports whether this replica holds
// it now.
func (e *Elector) try(ctx context.Context) bool {
	now := metav1.NewMicroTime(time.Now())
	secs := int32(e.Duration / time.Second)
	var l coordinationv1.Lease
	err := e.Client.Get().Namespace(e.Namespace).Resource("leases").Name(e.Name).Do(ctx).Into(&l)
	switch {
	case apierrors.IsNotFound(err):
		l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &e.Identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}}
		return e.Client.Post().Namespace(e.Namespace).Resource("leases").Body(&l).Do(ctx).Error() == nil
	case err != nil:
		e.Log.Debug("lease", zap.Error(err))
		return false // unknown: not the writer until it is known
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	record := holder
	if l.Spec.RenewTime != nil {
		record += " " + l.Spec.RenewTime.String()
	}
	if record != e.seen {
		e.seen, e.seenAt = record, time.Now()
	}
	if holder != e.Identity && holder != "" && time.Since(e.seenAt) < e.Duration {
		return false // held, and renewed lately
	}
	if holder != e.Identity {
		l.Spec.AcquireTime = &now
	}
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &e.Identity, &now, &secs
	// The resourceVersion read: another replica's write in between makes
	// this one fail.
	return e.Client.Put().Namespace(e.Namespace).Resource("leases").Name(e.Name).Body(&l).Do(ctx).Error() == nil
}

// release gives the Lease up at a stop, so another replica takes it at
// its next look instead of after the lease's duration.
func (e *Elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var l coordinationv1.Lease
	if err := e.Client.Get().Namespace(e.Namespace).Resource("leases").Name(e.Name).Do(ctx).Into(&l); err != nil {
		return
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.Identity {
		return
	}
	empty := ""
	l.Spec.HolderIdentity = &empty
	e.Client.Put().Namespace(e.Namespace).Resource("leases").Name(e.Name).Body(&l).Do(ctx)
}
