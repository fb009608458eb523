package watch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// start watches paths and returns the channel its changes arrive on.
func start(t *testing.T, paths ...string) (*Watcher, chan []string) {
	t.Helper()
	ch := make(chan []string, 16)
	w, err := New(20*time.Millisecond, func(changed []string) { ch <- changed })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Set(paths); err != nil {
		t.Fatal(err)
	}
	return w, ch
}

// next waits for the next change report.
func next(t *testing.T, ch chan []string, what string) []string {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no change reported within 10s", what)
		return nil
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestChanges: a file rewritten in place, one replaced by a rename, and
// one that goes missing are each reported; a write that leaves the
// content as it was is not (it comes in the same window as a real change
// elsewhere, which alone is reported).
func TestChanges(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pem"), filepath.Join(dir, "b.pem")
	write(t, a, "a1")
	write(t, b, "b1")
	write(t, filepath.Join(dir, "other"), "x")
	_, ch := start(t, a, b)

	write(t, a, "a2")
	if c := next(t, ch, "rewrite in place"); !slices.Equal(c, []string{a}) {
		t.Errorf("rewrite in place: %v, want [%s]", c, a)
	}

	tmp := filepath.Join(dir, ".b.tmp")
	write(t, tmp, "b2")
	if err := os.Rename(tmp, b); err != nil {
		t.Fatal(err)
	}
	if c := next(t, ch, "rename over"); !slices.Equal(c, []string{b}) {
		t.Errorf("rename over: %v, want [%s]", c, b)
	}

	write(t, a, "a2") // the same content
	write(t, b, "b3")
	if c := next(t, ch, "same content beside a change"); !slices.Equal(c, []string{b}) {
		t.Errorf("same content beside a change: %v, want [%s] only", c, b)
	}

	os.Remove(a)
	if c := next(t, ch, "removal"); !slices.Equal(c, []string{a}) {
		t.Errorf("removal: %v, want [%s]", c, a)
	}
	write(t, a, "a3")
	if c := next(t, ch, "return"); !slices.Equal(c, []string{a}) {
		t.Errorf("return: %v, want [%s]", c, a)
	}
}

// TestKubernetesSymlinkSwap: a Secret or ConfigMap volume, as the kubelet
// lays it out (atomic_writer.go): dir/tls.crt -> ..data/tls.crt, ..data ->
// ..2026_12_01_00_00_00.1, and an update writes a new timestamped
// directory, points ..data_tmp at it and renames ..data_tmp over ..data.
func TestKubernetesSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		t.Helper()
		os.Mkdir(filepath.Join(dir, name), 0o755)
		write(t, filepath.Join(dir, name, "tls.crt"), content)
	}
	version("..2026_12_01_00_00_00.1", "v1")
	if err := os.Symlink("..2026_12_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	crt := filepath.Join(dir, "tls.crt")
	if err := os.Symlink("..data/tls.crt", crt); err != nil {
		t.Fatal(err)
	}
	_, ch := start(t, crt)

	for i, v := range []string{"v2", "v3"} {
		name := "..2026_12_01_00_00_0" + string(rune('1'+i)) + ".1"
		version(name, v)
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if c := next(t, ch, "swap to "+v); !slices.Equal(c, []string{crt}) {
			t.Errorf("swap to %s: %v, want [%s]", v, c, crt)
		}
	}
}

// TestSymlinkTargetRewritten: a file named through a symlink into another
// directory is seen when its target is rewritten in place there.
func TestSymlinkTargetRewritten(t *testing.T) {
	real, named := t.TempDir(), t.TempDir()
	target := filepath.Join(real, "key.pem")
	write(t, target, "k1")
	link := filepath.Join(named, "key.pem")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, ch := start(t, link)
	write(t, target, "k2")
	if c := next(t, ch, "target rewritten"); !slices.Equal(c, []string{link}) {
		t.Errorf("target rewritten: %v, want [%s]", c, link)
	}
}

// TestSetAndClose: Set replaces the files (a file dropped is no longer
// reported), and Close returns with nothing left running.
func TestSetAndClose(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write(t, a, "1")
	write(t, b, "1")
	w, ch := start(t, a)
	if err := w.Set([]string{b}); err != nil {
		t.Fatal(err)
	}
	write(t, a, "2")
	write(t, b, "2")
	if c := next(t, ch, "after Set"); !slices.Equal(c, []string{b}) {
		t.Errorf("after Set: %v, want [%s]", c, b)
	}
	if err := w.Set([]string{filepath.Join(dir, "nowhere", "c")}); err == nil {
		t.Errorf("Set with a directory that does not exist: no error")
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := w.Set([]string{a}); err != os.ErrClosed {
		t.Errorf("Set after Close: %v, want os.ErrClosed", err)
	}
}
