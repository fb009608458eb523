package latest

import (
	"sync"
	"testing"
)

// The value not taken yet is replaced; one taken is not touched; Puts
// from several goroutines leave exactly one value, one of theirs.
func TestPut(t *testing.T) {
	ch := make(chan int, 1)
	Put(ch, 1)
	Put(ch, 2)
	if v := <-ch; v != 2 {
		t.Fatalf("got %d, want the latest, 2", v)
	}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() { Put(ch, i) })
	}
	wg.Wait()
	if len(ch) != 1 {
		t.Fatalf("%d values after the Puts, want 1", len(ch))
	}
	if v := <-ch; v < 0 || v >= 100 {
		t.Fatalf("got %d", v)
	}
}
