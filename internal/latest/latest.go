// Package latest hands a value to a goroutine that wants only the latest
// one: a channel of capacity 1 whose value not taken yet is replaced.
package latest

// Put sends v on ch, which must have capacity 1, in place of a value not
// taken yet. It never blocks for long: only while another Put races it.
func Put[T any](ch chan T, v T) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch: // replaced by v
		default:
		}
	}
}
