package gateway

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Lease settings (client-go's leaderelection defaults, shorter to renew).
const (
	// LeaseName is the Lease the replicas share, in their namespace.
	LeaseName = "baton-gateway-status"
	// DefaultLeaseDuration is how long a holder that stopped renewing
	// keeps the Lease; RetryPeriod how often each replica looks.
	DefaultLeaseDuration = 15 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// elector tells whether this replica writes status: every replica serves,
// one (the holder of a Lease) writes, so that replicas never argue over
// a status. It is client-go's leader election, on the controller's own
// REST client: a holder renews; another replica takes the Lease once it
// has seen it unchanged for the lease's duration (by its own clock, so
// skew between nodes does not matter).
type elector struct {
	c         *Client
	namespace string
	identity  string
	duration  time.Duration
	retry     time.Duration
	log       *zap.Logger
	onChange  func() // called when leadership is won or lost

	leader atomic.Bool

	// The record last seen, and when it was first seen so.
	seen   string
	seenAt time.Time
}

// Leader reports whether this replica holds the Lease.
func (e *elector) Leader() bool { return e.leader.Load() }

// run takes and renews the Lease until ctx ends, then lets it go.
func (e *elector) run(ctx context.Context) {
	t := time.NewTicker(e.retry)
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

func (e *elector) set(leader bool) {
	if e.leader.Swap(leader) != leader {
		e.log.Info("status writer", zap.Bool("leader", leader), zap.String("identity", e.identity))
		if e.onChange != nil {
			e.onChange()
		}
	}
}

// try takes or renews the Lease, and reports whether this replica holds
// it now.
func (e *elector) try(ctx context.Context) bool {
	now := metav1.NewMicroTime(time.Now())
	secs := int32(e.duration / time.Second)
	var l coordinationv1.Lease
	err := e.c.coord.Get().Namespace(e.namespace).Resource("leases").Name(LeaseName).Do(ctx).Into(&l)
	switch {
	case apierrors.IsNotFound(err):
		l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.namespace, Name: LeaseName},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &e.identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}}
		return e.c.coord.Post().Namespace(e.namespace).Resource("leases").Body(&l).Do(ctx).Error() == nil
	case err != nil:
		e.log.Debug("lease", zap.Error(err))
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
	if holder != e.identity && holder != "" && time.Since(e.seenAt) < e.duration {
		return false // held, and renewed lately
	}
	if holder != e.identity {
		l.Spec.AcquireTime = &now
	}
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &e.identity, &now, &secs
	// The resourceVersion read: another replica's write in between makes
	// this one fail.
	return e.c.coord.Put().Namespace(e.namespace).Resource("leases").Name(LeaseName).Body(&l).Do(ctx).Error() == nil
}

// release gives the Lease up at a stop, so another replica takes it at
// its next look instead of after the lease's duration.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var l coordinationv1.Lease
	if err := e.c.coord.Get().Namespace(e.namespace).Resource("leases").Name(LeaseName).Do(ctx).Into(&l); err != nil {
		return
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.identity {
		return
	}
	empty := ""
	l.Spec.HolderIdentity = &empty
	e.c.coord.Put().Namespace(e.namespace).Resource("leases").Name(LeaseName).Body(&l).Do(ctx)
}
