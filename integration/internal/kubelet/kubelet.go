// Package kubelet is a stand-in kubelet for machines with no container
// runtime: it registers a Node, binds the pods no scheduler binds, and runs
// each pod's container as a local process (a binary chosen by the image's
// name) in a network namespace of its own, with a veth to the namespace
// the kubelet runs in. It reports a pod Ready once the ports it listens on
// answer, finishes deletions as a kubelet does (SIGTERM, the grace period,
// SIGKILL), and serves the containers' logs on the node's kubelet port for
// the API server's pods/log.
//
// What it leaves out: one container per pod, no init containers, no
// probes of its own (a listening port is readiness), no restarts (a
// container that exits fails its pod and its ReplicaSet makes another),
// and volumes only of Secrets and ConfigMaps, written to a folder whose
// path replaces the mount path in the container's environment (the
// processes share the host's file system).
package kubelet

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Port is the kubelet's port, where the API server reads logs.
const Port = 10250

// Kubelet runs the pods bound to its Node. Set the fields, then Run.
type Kubelet struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// Node is the Node's name; NodeIP its address, which must be on an
	// interface of the kubelet's network namespace (its port listens
	// there).
	Node   string
	NodeIP netip.Addr
	// Pods is the range pod addresses are drawn from.
	Pods netip.Prefix
	// Images maps an image's name (its last path element, without tag or
	// digest: "echo-basic") to the binary that runs as its container.
	Images map[string]string
	// Dir holds the pods' volumes and logs.
	Dir string
	// Logf reports what the kubelet does.
	Logf func(format string, args ...any)

	queue workqueue.TypedRateLimitingInterface[types.NamespacedName]
	pods  cache.Indexer

	mu      sync.Mutex // protects running, used and seq
	running map[types.UID]*container
	used    map[netip.Addr]bool
	seq     int
	wg      sync.WaitGroup // the containers' goroutines
}

// Run registers the Node and runs pods until ctx ends; then it stops every
// container it started and returns.
func (k *Kubelet) Run(ctx context.Context) error {
	k.running = make(map[types.UID]*container)
	k.used = make(map[netip.Addr]bool)
	if err := k.register(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(k.Client, 0)
	inf := factory.Core().V1().Pods().Informer()
	k.pods = inf.GetIndexer() // before the log server, which reads it
	logs, err := k.serveLogs()
	if err != nil {
		return err
	}
	k.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			k.queue.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		logs.Close()
		k.wg.Wait()
		return ctx.Err()
	}
	var workers sync.WaitGroup
	for range 4 {
		workers.Go(func() {
			for k.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	k.queue.ShutDown()
	workers.Wait()

	k.mu.Lock()
	var all []*container
	for _, c := range k.running {
		all = append(all, c)
	}
	k.mu.Unlock()
	for _, c := range all {
		c.stop(0)
	}
	logs.Close()
	k.wg.Wait()
	return nil
}

func (k *Kubelet) next(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil && ctx.Err() == nil {
		k.Logf("kubelet: pod %s: %v", key, err)
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

// register creates the Node, Ready, with the kubelet's port at NodeIP.
func (k *Kubelet) register(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.Node, Labels: map[string]string{"kubernetes.io/hostname": k.Node}}}
	if _, err := k.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", k.Node, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.Client.CoreV1().Nodes().Get(ctx, k.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "the stand-in kubelet is running", LastHeartbeatTime: now, LastTransitionTime: now}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.NodeIP.String()}, {Type: corev1.NodeHostName, Address: k.Node}}
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = Port
		n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("1000")}
		n.Status.Allocatable = n.Status.Capacity
		_, err = k.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// sync brings one pod's process in line with the pod.
func (k *Kubelet) sync(ctx context.Context, key types.NamespacedName) error {
	obj, exists, err := k.pods.GetByKey(key.String())
	if err != nil {
		return err
	}
	if !exists {
		k.forget(key)
		return nil
	}
	pod := obj.(*corev1.Pod)
	switch {
	case pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil:
		err := k.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: k.Node},
		}, metav1.CreateOptions{})
		if apierrors.IsConflict(err) {
			return nil // bound already; the update comes
		}
		return err
	case pod.Spec.NodeName != k.Node:
		return nil
	case pod.DeletionTimestamp != nil:
		return k.finishDeletion(ctx, pod)
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		return nil
	}
	k.mu.Lock()
	_, running := k.running[pod.UID]
	k.mu.Unlock()
	if running {
		return nil
	}
	return k.start(ctx, pod)
}

// forget stops the containers of pods with key's name that are gone.
func (k *Kubelet) forget(key types.NamespacedName) {
	k.mu.Lock()
	var gone []*container
	for _, c := range k.running {
		if c.key == key {
			gone = append(gone, c)
		}
	}
	k.mu.Unlock()
	for _, c := range gone {
		c.stop(0)
	}
}

// finishDeletion stops the pod's container within its grace period and
// deletes the pod for good, as a kubelet does.
func (k *Kubelet) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	k.mu.Lock()
	c := k.running[pod.UID]
	k.mu.Unlock()
	if c != nil {
		grace := 30 * time.Second
		if s := pod.DeletionGracePeriodSeconds; s != nil {
			grace = time.Duration(*s) * time.Second
		}
		c.stop(grace)
	}
	err := k.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// allocate returns a free pod address.
func (k *Kubelet) allocate() (netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for a := k.Pods.Addr().Next(); k.Pods.Contains(a); a = a.Next() {
		if !k.used[a] {
			k.used[a] = true
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address in %s", k.Pods)
}

func (k *Kubelet) release(c *container) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.used, c.ip)
	if k.running[c.uid] == c {
		delete(k.running, c.uid)
	}
}

// setStatus writes the pod's status as mutate leaves it, on the newest
// version of the pod.
func (k *Kubelet) setStatus(ctx context.Context, key types.NamespacedName, uid types.UID, mutate func(*corev1.PodStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.Client.CoreV1().Pods(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != uid {
			return nil // another pod of the same name
		}
		mutate(&p.Status)
		_, err = k.Client.CoreV1().Pods(key.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

// failPod marks a pod Failed with reason and message: what a kubelet
// does for an image it cannot pull has no stand-in here.
func (k *Kubelet) failPod(ctx context.Context, pod *corev1.Pod, reason, msg string) error {
	k.Logf("kubelet: pod %s/%s: %s: %s", pod.Namespace, pod.Name, reason, msg)
	return k.setStatus(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, pod.UID, func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, reason, msg
	})
}

// image returns the binary for image, by its last path element.
func (k *Kubelet) image(image string) (string, bool) {
	name := image[strings.LastIndex(image, "/")+1:]
	if i := strings.IndexAny(name, ":@"); i >= 0 {
		name = name[:i]
	}
	bin, ok := k.Images[name]
	return bin, ok
}

// podDir is where a pod's volumes and logs live.
func (k *Kubelet) podDir(uid types.UID) string { return filepath.Join(k.Dir, "pods", string(uid)) }

// writeVolumes writes the pod's Secret and ConfigMap volumes and returns
// the folder of each by volume name.
func (k *Kubelet) writeVolumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	dirs := make(map[string]string)
	for _, v := range pod.Spec.Volumes {
		var data map[string][]byte
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			s, err := k.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			data, items = s.Data, v.Secret.Items
		case v.ConfigMap != nil:
			cm, err := k.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			data = make(map[string][]byte, len(cm.Data))
			for key, val := range cm.Data {
				data[key] = []byte(val)
			}
			items = v.ConfigMap.Items
		default:
			return nil, fmt.Errorf("volume %s: only Secret and ConfigMap volumes are supported", v.Name)
		}
		if len(items) == 0 {
			for key := range data {
				items = append(items, corev1.KeyToPath{Key: key, Path: key})
			}
		}
		dir := filepath.Join(k.podDir(pod.UID), "volumes", v.Name)
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				return nil, fmt.Errorf("volume %s: no key %q", v.Name, it.Key)
			}
			p := filepath.Join(dir, filepath.Clean("/"+it.Path))
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return nil, err
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				return nil, err
			}
		}
		dirs[v.Name] = dir
	}
	return dirs, nil
}

// env is the container's environment: values, fieldRefs and key refs,
// with mount paths in values replaced by the volumes' folders.
func (k *Kubelet) env(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container, ip netip.Addr, vols map[string]string) ([]string, error) {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOSTNAME=" + pod.Name}
	for _, e := range ctr.Env {
		val := e.Value
		if f := e.ValueFrom; f != nil {
			switch {
			case f.FieldRef != nil:
				switch f.FieldRef.FieldPath {
				case "metadata.name":
					val = pod.Name
				case "metadata.namespace":
					val = pod.Namespace
				case "metadata.uid":
					val = string(pod.UID)
				case "spec.nodeName":
					val = k.Node
				case "spec.serviceAccountName":
					val = pod.Spec.ServiceAccountName
				case "status.podIP", "status.podIPs":
					val = ip.String()
				case "status.hostIP", "status.hostIPs":
					val = k.NodeIP.String()
				default:
					return nil, fmt.Errorf("env %s: fieldRef %s not supported", e.Name, f.FieldRef.FieldPath)
				}
			case f.SecretKeyRef != nil:
				s, err := k.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, f.SecretKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
				val = string(s.Data[f.SecretKeyRef.Key])
			case f.ConfigMapKeyRef != nil:
				cm, err := k.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, f.ConfigMapKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
				val = cm.Data[f.ConfigMapKeyRef.Key]
			default:
				return nil, fmt.Errorf("env %s: valueFrom not supported", e.Name)
			}
		}
		for _, m := range ctr.VolumeMounts {
			if dir, ok := vols[m.Name]; ok && strings.HasPrefix(val, m.MountPath) {
				val = dir + strings.TrimPrefix(val, m.MountPath)
			}
		}
		env = append(env, e.Name+"="+val)
	}
	return env, nil
}
