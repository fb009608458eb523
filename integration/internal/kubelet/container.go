package kubelet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// readyWithin bounds how long a container may take to listen.
const readyWithin = 60 * time.Second

// container is a pod's running process.
type container struct {
	k    *Kubelet
	key  types.NamespacedName
	uid  types.UID
	name string
	ip   netip.Addr
	veth string
	cmd  *exec.Cmd
	log  string // the log file: one line per line of output, time first

	stopping chan struct{} // closed when the kubelet stops it
	exited   chan struct{} // closed when the process has exited
	logged   chan struct{} // closed when its output is all in the log
}

// start runs the pod's container: its volumes and environment, its
// network namespace, its process, and a goroutine that reports it Ready.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod) error {
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) != 0 {
		return k.failPod(ctx, pod, "Unsupported", "the stand-in kubelet runs exactly one container per pod, and no init containers")
	}
	ctr := &pod.Spec.Containers[0]
	bin, ok := k.image(ctr.Image)
	if !ok {
		return k.failPod(ctx, pod, "ErrImagePull", fmt.Sprintf("the stand-in kubelet has no binary for image %s", ctr.Image))
	}
	vols, err := k.writeVolumes(ctx, pod)
	if err != nil {
		return err
	}
	ip, err := k.allocate()
	if err != nil {
		return err
	}
	env, err := k.env(ctx, pod, ctr, ip, vols)
	if err != nil {
		k.release(&container{ip: ip})
		return err
	}
	k.mu.Lock()
	k.seq++
	veth := fmt.Sprintf("bk%d", k.seq)
	k.mu.Unlock()
	c := &container{
		k: k, key: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, uid: pod.UID, name: ctr.Name, ip: ip, veth: veth,
		log: filepath.Join(k.podDir(pod.UID), ctr.Name+".log"), stopping: make(chan struct{}), exited: make(chan struct{}), logged: make(chan struct{}),
	}
	if err := os.MkdirAll(filepath.Dir(c.log), 0o700); err != nil {
		k.release(c)
		return err
	}
	args := ctr.Args
	if len(ctr.Command) > 1 {
		args = append(ctr.Command[1:], args...) // the image's entrypoint is the binary
	}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env = env
	c.cmd.Dir = k.podDir(pod.UID)
	// A network namespace of its own; killed if the kubelet dies.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		k.release(c)
		return err
	}
	c.cmd.Stderr = c.cmd.Stdout
	if err := c.cmd.Start(); err != nil {
		k.release(c)
		return k.failPod(ctx, pod, "StartError", err.Error())
	}
	k.mu.Lock()
	k.running[pod.UID] = c
	k.mu.Unlock()
	k.Logf("kubelet: pod %s: started %s as pid %d at %s", c.key, ctr.Image, c.cmd.Process.Pid, ip)

	k.wg.Go(func() { c.copyLog(out) })
	k.wg.Go(func() { c.wait(ctx) })
	if err := c.network(); err != nil {
		c.stop(0)
		return fmt.Errorf("network: %w", err)
	}
	k.wg.Go(func() { c.reportReady(ctx, pod) })
	return nil
}

// network gives the container's namespace eth0 with its address, the
// peer of a veth in the kubelet's namespace that routes the address.
func (c *container) network() error {
	pid := strconv.Itoa(c.cmd.Process.Pid)
	ip := c.ip.String()
	host := [][]string{
		{"link", "add", c.veth, "type", "veth", "peer", "name", "eth0", "netns", pid},
		{"link", "set", c.veth, "up"},
		{"route", "add", ip + "/32", "dev", c.veth},
	}
	for _, args := range host {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+c.veth+"/proxy_arp", []byte("1"), 0o644); err != nil {
		return err
	}
	inside := [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", ip + "/32", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "dev", "eth0"},
	}
	for _, args := range inside {
		cmd := exec.Command("nsenter", append([]string{"-t", pid, "-n", "ip"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("in the pod: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// copyLog writes the container's output to its log, each line after the
// time it was read (RFC 3339, as the CRI's log format has it).
func (c *container) copyLog(out io.Reader) {
	defer close(c.logged)
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.k.Logf("kubelet: pod %s: log: %v", c.key, err)
		io.Copy(io.Discard, out)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), sc.Text())
	}
}

// wait reaps the process; one that exits unasked fails its pod.
func (c *container) wait(ctx context.Context) {
	<-c.logged // Wait closes the pipe: its last lines first
	err := c.cmd.Wait()
	close(c.exited)
	exec.Command("ip", "link", "del", c.veth).Run() // gone with the namespace, usually
	select {
	case <-c.stopping:
		c.k.release(c)
		return
	default:
	}
	// Failed before it is forgotten: a pod event meanwhile must not find
	// it neither running nor failed, and start it again.
	defer c.k.release(c)
	code := int32(c.cmd.ProcessState.ExitCode())
	c.k.Logf("kubelet: pod %s: exited: %v", c.key, err)
	now := metav1.Now()
	c.k.setStatus(ctx, c.key, c.uid, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodFailed
		setCondition(s, corev1.PodReady, corev1.ConditionFalse, now)
		setCondition(s, corev1.ContainersReady, corev1.ConditionFalse, now)
		for i := range s.ContainerStatuses {
			s.ContainerStatuses[i].Ready = false
			s.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", FinishedAt: now}}
		}
	})
}

// stop ends the process: SIGTERM, and SIGKILL after grace.
func (c *container) stop(grace time.Duration) {
	select {
	case <-c.stopping:
	default:
		close(c.stopping)
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(grace):
		c.cmd.Process.Kill()
		<-c.exited
	}
}

// reportReady waits until the ports the container listens on answer at
// its address, then reports the pod Running and Ready.
func (c *container) reportReady(ctx context.Context, pod *corev1.Pod) {
	deadline := time.Now().Add(readyWithin)
	var last []string
	for {
		// Ready when the same ports listen twice running and all answer:
		// a server that opens several listeners has opened them all.
		ports := c.listening()
		if len(ports) > 0 && slices.Equal(ports, last) && c.answer(ports) {
			break
		}
		last = ports
		select {
		case <-ctx.Done():
			return
		case <-c.exited:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.k.Logf("kubelet: pod %s: no port answered within %v", c.key, readyWithin)
			return
		}
	}
	now := metav1.Now()
	ctr := pod.Spec.Containers[0]
	err := c.k.setStatus(ctx, c.key, c.uid, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.HostIP, s.HostIPs = c.k.NodeIP.String(), []corev1.HostIP{{IP: c.k.NodeIP.String()}}
		s.PodIP, s.PodIPs = c.ip.String(), []corev1.PodIP{{IP: c.ip.String()}}
		s.StartTime = &now
		for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			setCondition(s, t, corev1.ConditionTrue, now)
		}
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image, Ready: true, Started: new(true),
			ContainerID: fmt.Sprintf("baton://%d", c.cmd.Process.Pid),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}}
	})
	if err != nil && ctx.Err() == nil {
		c.k.Logf("kubelet: pod %s: status: %v", c.key, err)
		return
	}
	c.k.Logf("kubelet: pod %s: ready at %s", c.key, c.ip)
}

func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, status corev1.ConditionStatus, now metav1.Time) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != status {
				s.Conditions[i].Status, s.Conditions[i].LastTransitionTime = status, now
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
}

// listening returns the TCP ports the process listens on, read from its
// namespace's /proc/PID/net/tcp and tcp6.
func (c *container) listening() []string {
	var ports []string
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", c.cmd.Process.Pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "0A" { // TCP_LISTEN
				continue
			}
			if i := strings.LastIndexByte(fs[1], ':'); i >= 0 {
				if p, err := strconv.ParseUint(fs[1][i+1:], 16, 16); err == nil {
					ports = append(ports, strconv.FormatUint(p, 10))
				}
			}
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// answer reports whether every port accepts a connection at the pod's
// address.
func (c *container) answer(ports []string) bool {
	for _, p := range ports {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.ip.String(), p), time.Second)
		if err != nil {
			return false
		}
		conn.Close()
	}
	return true
}
