package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExamplesCheckOffline lints every example config with the real
// binary as CI would, away from any cluster: `baton check --offline`
// passes, and plain `baton check` of the Kubernetes one says why it
// cannot pass here.
func TestExamplesCheckOffline(t *testing.T) {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()} // no kubeconfig anywhere
	for _, cfg := range []string{"../examples/baton.yaml", "../examples/kubernetes/baton.yaml", "../examples/kubernetes/gateway/baton.yaml", "../examples/kubernetes/ingress/baton.yaml"} {
		cmd := exec.Command(batonBin, "check", "--offline", "--config", cfg)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "config ok") {
			t.Errorf("baton check --offline --config %s: %v\n%s", filepath.Base(filepath.Dir(cfg))+"/"+filepath.Base(cfg), err, out)
		}
	}
	cmd := exec.Command(batonBin, "check", "--config", "../examples/kubernetes/baton.yaml")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--offline") {
		t.Errorf("baton check of a Kubernetes config without a cluster: %v %s; want it refused, pointing at --offline", err, out)
	}
}
